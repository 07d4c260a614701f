#pragma once

#include "core/abort_source.hh"
#include "core/future.hh"
#include "core/preempt.hh"
#include "core/timer.hh"

#include <exception>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace shoal {

/// What a `repeat` body returns: whether to run again.
enum class stop_iteration : bool { no = false, yes = true };

/// Thrown into the future `with_timeout` returns when the deadline passes first.
class timed_out_error : public std::runtime_error {
public:
    timed_out_error()
        : std::runtime_error("timed out") {}
};

/// Lets other queued tasks run, resuming afterwards (one allocation).
future<> yield() noexcept;

namespace internal {
/// Turns `f` into a future that resolves (with `f` itself, value or exception) when `f` does.
template <typename T>
future<future<T>> when_ready(future<T>&& f) {
    return std::move(f).then_wrapped([](future<T> r) { return make_ready_future<future<T>>(std::move(r)); });
}
} // namespace internal

/// Waits for every future; resolves with them all, each ready (value or exception).
template <typename T>
future<std::vector<future<T>>> when_all(std::vector<future<T>> futures) {
    for (auto& f : futures) {
        if (!f.available()) {
            f = co_await internal::when_ready(std::move(f));
        }
    }
    co_return std::move(futures);
}

namespace internal {
template <size_t I, typename Tuple>
future<> wait_all_from(Tuple& all) {
    if constexpr (I == std::tuple_size_v<Tuple>) {
        return make_ready_future<>();
    } else {
        auto& f = std::get<I>(all);
        if (f.available()) {
            return wait_all_from<I + 1>(all);
        }
        return when_ready(std::move(f)).then([&all](auto ready) {
            std::get<I>(all) = std::move(ready);
            return wait_all_from<I + 1>(all);
        });
    }
}
} // namespace internal

/// Waits for every future given; resolves with a tuple of them, each ready.
template <typename... T>
future<std::tuple<future<T>...>> when_all(future<T>&&... futures) {
    std::tuple<future<T>...> all(std::move(futures)...);
    co_await internal::wait_all_from<0>(all);
    co_return std::move(all);
}

/// Waits for every future; fails with the first exception (after all have resolved).
inline future<> when_all_succeed(std::vector<future<>> futures) {
    std::exception_ptr first;
    for (auto& f : futures) {
        try {
            co_await std::move(f);
        } catch (...) {
            if (!first) {
                first = std::current_exception();
            }
        }
    }
    if (first) {
        std::rethrow_exception(first);
    }
}

/// Waits for every future and collects their values; fails with the first exception.
template <typename T>
future<std::vector<T>> when_all_succeed(std::vector<future<T>> futures) {
    std::vector<T> values;
    values.reserve(futures.size());
    std::exception_ptr first;
    for (auto& f : futures) {
        try {
            values.push_back(co_await std::move(f));
        } catch (...) {
            if (!first) {
                first = std::current_exception();
            }
        }
    }
    if (first) {
        std::rethrow_exception(first);
    }
    co_return std::move(values);
}

/// Calls `func(element)` for every element at once and waits for all of them; fails with the
/// first exception after all have resolved. The calls are all made before it returns (the range
/// need only live during the call), so they are not preempted; the wait for them is.
template <typename Range, typename Func>
future<> parallel_for_each(Range&& range, Func func) {
    std::vector<future<>> pending;
    std::exception_ptr first;
    for (auto&& element : range) {
        auto f = futurize_invoke(func, element);
        if (!f.available()) {
            pending.push_back(std::move(f));
        } else if (f.failed() && !first) {
            first = f.get_exception();
        } else {
            f.ignore_ready_future();
        }
    }
    if (pending.empty()) {
        return first ? make_exception_future<>(first) : make_ready_future<>();
    }
    auto all = when_all_succeed(std::move(pending));
    if (!first) {
        return all;
    }
    return std::move(all).then_wrapped([first](future<> f) {
        f.ignore_ready_future();
        return make_exception_future<>(first);
    });
}

/// Runs `func()` (returning stop_iteration or future<stop_iteration>) until it says yes.
/// Ready iterations run back to back until the shard's task quota is used up
/// (`need_preempt()`); then the loop yields to the reactor, so it cannot starve timers or I/O.
template <typename Func>
future<> repeat(Func func) {
    for (;;) {
        // A co_await of a ready future yields by itself when need_preempt() is true.
        auto f = futurize_invoke(func);
        if (co_await std::move(f) == stop_iteration::yes) {
            co_return;
        }
    }
}

/// Runs `func()` (returning void or future<>) until `stop()` returns true (checked first).
/// Yields to the reactor whenever the task quota is used up, like `repeat`.
template <typename Stop, typename Func>
future<> do_until(Stop stop, Func func) {
    while (!stop()) {
        co_await futurize_invoke(func);
    }
}

/// Runs `func()` (returning void or future<>) forever, until it fails.
template <typename Func>
future<> keep_doing(Func func) {
    return repeat([func = std::move(func)]() mutable {
        return futurize_invoke(func).then([] { return stop_iteration::no; });
    });
}

namespace internal {
template <typename Tuple, typename Func, size_t... I>
auto do_with_impl(Tuple&& values, Func&& func, std::index_sequence<I...>) {
    auto held = std::make_unique<Tuple>(std::move(values));
    auto f = futurize_invoke(func, std::get<I>(*held)...);
    if (f.available()) {
        return f;
    }
    return std::move(f).finally([held = std::move(held)] {});
}
template <typename... A, size_t... I>
auto do_with_split(std::tuple<A...>&& all, std::index_sequence<I...>) {
    using values_t = std::tuple<std::decay_t<std::tuple_element_t<I, std::tuple<A...>>>...>;
    values_t values(std::forward<std::tuple_element_t<I, std::tuple<A...>>>(std::get<I>(all))...);
    auto&& func = std::get<sizeof...(A) - 1>(all);
    return do_with_impl(std::move(values), std::move(func), std::index_sequence<I...>{});
}
} // namespace internal

/// `do_with(v1, v2, ..., func)`: keeps the values alive (at stable addresses) until the future
/// returned by `func(v1&, v2&, ...)` resolves.
template <typename... A>
auto do_with(A&&... args) {
    static_assert(sizeof...(A) >= 2, "do_with needs at least one value and a function");
    return internal::do_with_split(std::forward_as_tuple(std::forward<A>(args)...),
                                   std::make_index_sequence<sizeof...(A) - 1>{});
}

namespace internal {
/// The shared state of `with_timeout`: a timer racing the future; freed by the last of the two.
template <typename T>
class timeout_race final : public timer_base {
public:
    explicit timeout_race(steady_clock_type::time_point deadline) {
        _expiry = deadline;
        local_reactor().add_timer(this);
    }
    future<T> get_future() { return _pr.get_future(); }
    void finish(future<T>&& r) noexcept {
        if (!_done) {
            _done = true;
            local_reactor().del_timer(this);
            --_refs; // the timer will never expire now
            std::move(r).forward_to(std::move(_pr));
        } else {
            r.ignore_ready_future();
        }
        release();
    }

private:
    void expire() noexcept override {
        if (!_done) {
            _done = true;
            _pr.set_exception(std::make_exception_ptr(timed_out_error()));
        }
        release();
    }
    void release() noexcept {
        if (--_refs == 0) {
            delete this;
        }
    }
    promise<T> _pr;
    unsigned _refs = 2;
    bool _done = false;
};
} // namespace internal

/// Resolves like `f`, or fails with `timed_out_error` once `deadline` passes. The operation
/// behind `f` is not cancelled; its late result is dropped. To really cancel it, pass a function
/// that takes an `abort_source&` instead (below).
template <typename T, typename Clock = steady_clock_type>
future<T> with_timeout(typename Clock::time_point deadline, future<T> f) {
    if (f.available()) {
        return f;
    }
    steady_clock_type::time_point when;
    if constexpr (std::is_same_v<Clock, lowres_clock>) {
        when = lowres_clock::to_steady(deadline);
    } else {
        when = deadline;
    }
    auto* race = new internal::timeout_race<T>(when);
    auto result = race->get_future();
    (void)std::move(f).then_wrapped([race](future<T> r) { race->finish(std::move(r)); });
    return result;
}

/// Runs `func(as)` with an abort_source that is aborted with `timed_out_error` when `deadline`
/// passes: an operation that honours `as` (sleep_abortable, semaphore::wait(as, n), transports'
/// operations that take one) is really cancelled and fails with `timed_out_error`. The returned
/// future resolves when `func`'s does (an operation that ignores `as` runs to completion); `as`
/// lives until then.
template <typename Func>
requires std::is_invocable_v<Func, abort_source&>
auto with_timeout(steady_clock_type::time_point deadline, Func func)
    -> futurize_t<std::invoke_result_t<Func, abort_source&>> {
    struct cancellation {
        abort_source as;
        timer<> deadline_timer;
    };
    auto c = std::make_unique<cancellation>();
    c->deadline_timer.set_callback([as = &c->as] { as->request_abort_ex(timed_out_error()); });
    c->deadline_timer.arm(deadline);
    auto f = futurize_invoke(func, c->as);
    if (f.available()) {
        return f;
    }
    return std::move(f).finally([c = std::move(c)] {});
}

} // namespace shoal
