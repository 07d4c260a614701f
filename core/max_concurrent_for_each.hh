#pragma once

#include "core/future.hh"
#include "core/semaphore.hh"

#include <cassert>
#include <cstddef>
#include <exception>
#include <utility>

namespace shoal {

/// Calls `func(element)` for the elements of `range` in order, with at most `max_concurrent`
/// calls whose futures have not resolved yet; resolves once every started call has. After the
/// first failure no further element is started: the result fails with that exception once the
/// calls in flight have resolved (their failures are consumed). The range is walked lazily, so
/// it (and what its iterators refer to) must live until the returned future resolves.
/// `max_concurrent` must be at least 1. Ready calls run back to back until the shard's task quota
/// is used up, then the walk yields.
template <typename Range, typename Func>
future<> max_concurrent_for_each(Range& range, size_t max_concurrent, Func func) {
    assert(max_concurrent > 0);
    semaphore slots(max_concurrent);
    std::exception_ptr first;
    auto record = [&first](future<>&& f) noexcept {
        if (f.failed()) {
            auto ex = f.get_exception();
            if (!first) {
                first = std::move(ex);
            }
        } else {
            f.ignore_ready_future();
        }
    };
    for (auto&& element : range) {
        co_await slots.wait(1);
        if (first) {
            slots.signal(1);
            break;
        }
        future<> f = futurize_invoke(func, element).discard_result();
        if (f.available()) {
            record(std::move(f));
            slots.signal(1);
        } else {
            (void)std::move(f).then_wrapped([&record, &slots](future<> r) noexcept {
                record(std::move(r));
                slots.signal(1);
            });
        }
    }
    co_await slots.wait(max_concurrent); // every call started has resolved
    if (first) {
        std::rethrow_exception(first);
    }
}

} // namespace shoal
