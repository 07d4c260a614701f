#pragma once

#include "core/abort_source.hh"
#include "core/clock.hh"
#include "core/deadline_waiter.hh"
#include "core/future.hh"
#include "core/small_pool.hh"

#include <cstddef>
#include <exception>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace shoal {

/// Thrown into waiters of a condition variable that was broken (or destroyed).
class broken_condition_variable : public std::runtime_error {
public:
    broken_condition_variable()
        : std::runtime_error("condition variable broken") {}
};

/// Thrown into a waiter whose deadline passed before it was signalled.
class condition_variable_timed_out : public std::runtime_error {
public:
    condition_variable_timed_out()
        : std::runtime_error("condition variable wait timed out") {}
};

/// A condition variable for one shard: fibers and coroutines `wait()` until another task
/// `signal()`s (wakes the oldest waiter) or `broadcast()`s (wakes every current waiter). There is
/// no mutex: a shard runs one task at a time, so checking a condition and starting to wait is
/// atomic with respect to the shard's other tasks. A signal with nobody waiting is lost, as with
/// `std::condition_variable`; use the predicate forms to wait for a state rather than an event.
/// Each pending wait costs one small object from the shard's `small_pool` (its promise, queue
/// links, deadline timer and abort subscription in one), none when the wait completes at once.
/// Neither copyable nor movable; not thread-safe by design.
class condition_variable {
public:
    condition_variable() noexcept = default;
    condition_variable(const condition_variable&) = delete;
    condition_variable& operator=(const condition_variable&) = delete;
    /// Fails the waiters still queued with `broken_condition_variable`.
    ~condition_variable() {
        if (_head) {
            broken();
        }
    }

    /// Resolves at the next `signal()` that picks this waiter or the next `broadcast()`; fails
    /// with the exception given to `broken()` if the variable is or gets broken.
    future<> wait() {
        if (_ex) {
            return make_exception_future<>(_ex);
        }
        return enqueue(new waiter(*this));
    }

    /// Like `wait()`, but fails with `condition_variable_timed_out` if not woken by `deadline`.
    future<> wait(steady_clock_type::time_point deadline) {
        if (_ex) {
            return make_exception_future<>(_ex);
        }
        auto* w = new waiter(*this);
        w->arm_deadline(deadline);
        return enqueue(w);
    }
    /// Like `wait()`, but fails with `condition_variable_timed_out` after `timeout`.
    future<> wait(steady_clock_type::duration timeout) { return wait(steady_clock_type::now() + timeout); }

    /// Like `wait()`, but gives up when `as` is aborted: the waiter leaves the queue and fails
    /// with the abort's reason. Fails at once if `as` was already aborted.
    future<> wait(abort_source& as) {
        if (_ex) {
            return make_exception_future<>(_ex);
        }
        if (as.abort_requested()) {
            return make_exception_future<>(as.abort_exception());
        }
        auto* w = new waiter(*this);
        w->on_abort = as.subscribe([w](const std::exception_ptr& ex) { w->cv->finish(w, ex); });
        return enqueue(w);
    }

    /// Waits until `pred()` returns true: checks it first (a true predicate resolves at once,
    /// even on a broken variable), then again after every wake-up. A throwing predicate fails
    /// the wait with its exception.
    template <typename Pred>
    requires std::is_invocable_r_v<bool, Pred&> future<> wait(Pred pred) {
        return wait_for_predicate(std::move(pred), [this] { return wait(); });
    }
    /// Waits until `pred()` returns true, failing with `condition_variable_timed_out` if it is
    /// still false at `deadline`.
    template <typename Pred>
    requires std::is_invocable_r_v<bool, Pred&> future<> wait(steady_clock_type::time_point deadline,
                                                              Pred pred) {
        return wait_for_predicate(std::move(pred), [this, deadline] { return wait(deadline); });
    }
    /// Waits until `pred()` returns true, failing with `condition_variable_timed_out` if it is
    /// still false after `timeout`.
    template <typename Pred>
    requires std::is_invocable_r_v<bool, Pred&> future<> wait(steady_clock_type::duration timeout,
                                                              Pred pred) {
        return wait(steady_clock_type::now() + timeout, std::move(pred));
    }
    /// Waits until `pred()` returns true, failing with the abort's reason once `as` is aborted.
    template <typename Pred>
    requires std::is_invocable_r_v<bool, Pred&> future<> wait(abort_source& as, Pred pred) {
        return wait_for_predicate(std::move(pred), [this, &as] { return wait(as); });
    }

    /// Wakes the oldest waiter, if any; a signal with no waiter is lost.
    void signal() noexcept {
        if (_head) {
            finish(_head, nullptr);
        }
    }
    /// Wakes every waiter queued now (their continuations run later, as tasks).
    void broadcast() noexcept {
        while (_head) {
            finish(_head, nullptr);
        }
    }

    /// Fails every current and later waiter with `ex`.
    void broken(std::exception_ptr ex) noexcept {
        _ex = ex;
        while (_head) {
            finish(_head, ex);
        }
    }
    /// Fails every current and later waiter with `broken_condition_variable`.
    void broken() noexcept { broken(std::make_exception_ptr(broken_condition_variable())); }

    /// Whether somebody waits.
    bool has_waiters() const noexcept { return _head != nullptr; }
    /// Number of waiters queued.
    size_t waiters() const noexcept { return _count; }

private:
    /// One pending wait: the promise of its future, its place in the queue, and optionally its
    /// deadline (the waiter is itself the timer) and its abort subscription.
    struct waiter final : internal::deadline_waiter {
        SHOAL_SMALL_POOL_ALLOCATED
        explicit waiter(condition_variable& c) noexcept
            : cv(&c) {}
        void deadline_passed() noexcept override {
            cv->finish(this, std::make_exception_ptr(condition_variable_timed_out()));
        }

        condition_variable* cv;
        promise<> pr;
        waiter* prev = nullptr;
        waiter* next = nullptr;
        abort_source::subscription on_abort;
    };

    future<> enqueue(waiter* w) noexcept {
        w->prev = _tail;
        (_tail ? _tail->next : _head) = w;
        _tail = w;
        ++_count;
        return w->pr.get_future();
    }

    /// Takes `w` out of the queue, resolves it (value when `ex` is null) and frees it.
    void finish(waiter* w, const std::exception_ptr& ex) noexcept {
        (w->prev ? w->prev->next : _head) = w->next;
        (w->next ? w->next->prev : _tail) = w->prev;
        --_count;
        w->disarm_deadline();
        if (ex) {
            w->pr.set_exception(ex);
        } else {
            w->pr.set_value();
        }
        delete w; // also drops the abort subscription (already unlinked if it is what called)
    }

    template <typename Pred, typename Wait>
    static future<> wait_for_predicate(Pred pred, Wait wait_once) {
        try {
            if (pred()) {
                return make_ready_future<>();
            }
        } catch (...) {
            return make_exception_future<>(std::current_exception());
        }
        return wait_loop(std::move(pred), std::move(wait_once));
    }
    template <typename Pred, typename Wait>
    static future<> wait_loop(Pred pred, Wait wait_once) {
        do {
            co_await wait_once();
        } while (!pred());
    }

    waiter* _head = nullptr;
    waiter* _tail = nullptr;
    size_t _count = 0;
    std::exception_ptr _ex;
};

} // namespace shoal
