#pragma once

#include "core/future.hh"

#include <cstddef>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace shoal {

/// What `when_any` resolves with: which future resolved first and that future, ready (value or
/// exception, for the caller to consume).
template <typename T>
struct when_any_result {
    /// The position of the first future to resolve among those given.
    size_t index;
    /// That future, ready.
    future<T> first;
};

namespace internal {

/// The race of `when_any`: the promise of its result, and how many pending futures still
/// refer to it; freed by the last one to resolve.
template <typename T>
struct when_any_race {
    promise<when_any_result<T>> pr;
    size_t pending = 0;
    bool decided = false;

    void finish(size_t index, future<T>&& r) noexcept {
        if (!decided) {
            decided = true;
            pr.set_value(when_any_result<T>{index, std::move(r)});
        } else {
            r.ignore_ready_future(); // a loser: its value or failure is dropped on purpose
        }
        if (--pending == 0) {
            delete this;
        }
    }
};

} // namespace internal

/// Resolves as soon as one of `futures` does, with its position and the ready future (a failed
/// first future is handed over as is, not thrown). The others keep running; their results,
/// values or failures, are consumed and dropped when they arrive, so none is reported as an
/// ignored failure. Among futures already resolved at the call, the first in order wins. Fails
/// with `std::invalid_argument` when given no future. Costs one allocation for the race plus
/// one continuation per pending future.
template <typename T>
future<when_any_result<T>> when_any(std::vector<future<T>> futures) {
    if (futures.empty()) {
        return make_exception_future<when_any_result<T>>(std::invalid_argument("when_any of no future"));
    }
    for (size_t i = 0; i < futures.size(); ++i) {
        if (futures[i].available()) {
            for (size_t j = 0; j < futures.size(); ++j) {
                if (j == i) {
                    continue;
                }
                if (futures[j].available()) {
                    futures[j].ignore_ready_future();
                } else {
                    (void)std::move(futures[j]).then_wrapped([](future<T> r) noexcept {
                        r.ignore_ready_future();
                    });
                }
            }
            return make_ready_future<when_any_result<T>>(when_any_result<T>{i, std::move(futures[i])});
        }
    }
    auto* race = new internal::when_any_race<T>();
    race->pending = futures.size();
    auto result = race->pr.get_future();
    for (size_t i = 0; i < futures.size(); ++i) {
        (void)std::move(futures[i]).then_wrapped([race, i](future<T> r) noexcept {
            race->finish(i, std::move(r));
        });
    }
    return result;
}

/// `when_any` of futures of the same type given one by one.
template <typename T, typename... More>
requires(std::is_same_v<future<T>, More>&&...) future<when_any_result<T>> when_any(future<T>&& first,
                                                                                   More&&... more) {
    std::vector<future<T>> all;
    all.reserve(1 + sizeof...(More));
    all.push_back(std::move(first));
    (all.push_back(std::move(more)), ...);
    return when_any(std::move(all));
}

} // namespace shoal
