#pragma once

// The callback forms of the C ABI: work handed to a handle's shard whose outcome is reported
// to the caller's callback there, exactly once when the call was accepted.

#include "capi/shard_handle.hh"
#include "capi/status.hh"
#include "core/alien.hh"
#include "shoal/shoal_c.h"

#include <chrono>
#include <future>
#include <memory>
#include <string>

namespace shoal::capi {

/// What an _async call's work yields on the shard: a status, the error text when it is not
/// SHOAL_OK, and a value (of a read).
template <typename T>
struct async_result {
    int status = SHOAL_OK;
    std::string error;
    T value{};
};

/// Hands `fn(State&)` (returning a future<async_result<T>>) to `st`'s shard and reports its
/// outcome there to `report(status, error text or NULL, result or NULL)`. SHOAL_OK when handed
/// over (`report` will run exactly once), SHOAL_ECLOSED when the engine refused it (never runs).
template <typename State, typename Fn, typename Report>
int start_async(std::shared_ptr<State> st, const char* what, Fn fn, Report report) {
    auto queued = st->runtime().engine().submit(
        st->shard(), [st, fn = std::move(fn), report = std::move(report)]() mutable {
            return futurize_invoke([&] { return fn(*st); })
                .then_wrapped([report = std::move(report)](auto f) mutable {
                    if (f.failed()) {
                        auto failure = classify(f.get_exception());
                        report(failure.status, failure.text.c_str(), nullptr);
                    } else {
                        auto result = f.get();
                        report(result.status, result.status == SHOAL_OK ? nullptr : result.error.c_str(),
                               &result);
                    }
                });
        });
    // Refused before it ran (the runtime stopped meanwhile): the callback will not run.
    if (queued.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
        try {
            queued.get();
        } catch (const alien::engine_stopped& e) {
            return fail(SHOAL_ECLOSED, std::string(what) + ": " + e.what());
        } catch (...) {
        }
    }
    return SHOAL_OK;
}

/// start_async for work that yields no value: `fn(State&)` returns a future<>, and its outcome
/// goes to `done(user, status, error text or NULL)`.
template <typename State, typename Fn>
int start_async_done(std::shared_ptr<State> st, const char* what, Fn fn, shoal_done_cb done, void* user) {
    return start_async(
        std::move(st), what,
        [fn = std::move(fn)](State& s) {
            return futurize_invoke(fn, s).then([] { return async_result<int>{}; });
        },
        [done, user](int status, const char* error, async_result<int>*) { done(user, status, error); });
}

} // namespace shoal::capi
