#pragma once

#include "core/abort_source.hh"
#include "core/future.hh"
#include "core/timer.hh"

#include <cstddef>
#include <deque>
#include <exception>
#include <stdexcept>
#include <utility>

namespace shoal {

/// Thrown into waiters of a semaphore that was broken (e.g. at shutdown).
class broken_semaphore : public std::runtime_error {
public:
    broken_semaphore()
        : std::runtime_error("semaphore broken") {}
};

/// Thrown into a waiter whose deadline passed before it got its units.
class semaphore_timed_out : public std::runtime_error {
public:
    semaphore_timed_out()
        : std::runtime_error("semaphore wait timed out") {}
};

/// A counting semaphore for one shard: `wait(n)` takes n units (waiting in FIFO order when
/// there are not enough), `signal(n)` returns them. Not thread-safe by design.
class semaphore {
public:
    explicit semaphore(size_t units) noexcept
        : _count(units) {}
    semaphore(const semaphore&) = delete;
    semaphore& operator=(const semaphore&) = delete;
    ~semaphore() { broken(std::make_exception_ptr(broken_semaphore())); }

    /// Takes `units`, now if available and nobody waits before us, else when signalled.
    future<> wait(size_t units = 1) {
        if (_ex) {
            return make_exception_future<>(_ex);
        }
        if (_waiters.empty() && _count >= units) {
            _count -= units;
            return make_ready_future<>();
        }
        _waiters.emplace_back(units);
        return _waiters.back().pr.get_future();
    }

    /// Like `wait`, but fails with `semaphore_timed_out` if the units are not granted by
    /// `deadline`.
    future<> wait(steady_clock_type::time_point deadline, size_t units = 1) {
        if (_ex) {
            return make_exception_future<>(_ex);
        }
        if (_waiters.empty() && _count >= units) {
            _count -= units;
            return make_ready_future<>();
        }
        auto& w = _waiters.emplace_back(units);
        w.expiry = std::make_unique<timer<>>([this, id = w.id] { expire(id); });
        w.expiry->arm(deadline);
        return w.pr.get_future();
    }

    /// Like `wait`, but gives up when `as` is aborted: the waiter leaves the queue and fails with
    /// the abort's reason (`abort_requested_exception` by default). Fails at once if `as` was
    /// already aborted.
    future<> wait(abort_source& as, size_t units = 1) {
        if (_ex) {
            return make_exception_future<>(_ex);
        }
        if (as.abort_requested()) {
            return make_exception_future<>(as.abort_exception());
        }
        if (_waiters.empty() && _count >= units) {
            _count -= units;
            return make_ready_future<>();
        }
        auto& w = _waiters.emplace_back(units);
        w.on_abort = as.subscribe([this, id = w.id](const std::exception_ptr& ex) { fail_waiter(id, ex); });
        return w.pr.get_future();
    }

    /// Takes `units` if available right now (and nobody waits); returns whether it did.
    bool try_wait(size_t units = 1) noexcept {
        if (!_ex && _waiters.empty() && _count >= units) {
            _count -= units;
            return true;
        }
        return false;
    }

    /// Returns `units` and wakes the waiters that now fit, in order.
    void signal(size_t units = 1) noexcept {
        _count += units;
        while (!_waiters.empty() && _waiters.front().units <= _count) {
            auto& w = _waiters.front();
            _count -= w.units;
            w.pr.set_value();
            _waiters.pop_front();
        }
    }

    /// Fails every current and future waiter with `ex`.
    void broken(std::exception_ptr ex) noexcept {
        _ex = ex;
        while (!_waiters.empty()) {
            _waiters.front().pr.set_exception(ex);
            _waiters.pop_front();
        }
    }
    void broken() noexcept { broken(std::make_exception_ptr(broken_semaphore())); }

    /// Units available right now.
    size_t available_units() const noexcept { return _count; }
    /// Number of waiters queued.
    size_t waiters() const noexcept { return _waiters.size(); }
    /// Takes units unconditionally (may go "negative" in effect by leaving fewer for waiters).
    void consume(size_t units) noexcept { _count = units > _count ? 0 : _count - units; }

private:
    struct waiter {
        explicit waiter(size_t u)
            : units(u)
            , id(++next_id()) {}
        promise<> pr;
        size_t units;
        uint64_t id;
        std::unique_ptr<timer<>> expiry;
        abort_source::subscription on_abort;
        static uint64_t& next_id() {
            static thread_local uint64_t id = 0;
            return id;
        }
    };
    void expire(uint64_t id) noexcept { fail_waiter(id, std::make_exception_ptr(semaphore_timed_out())); }
    /// Removes waiter `id` from the queue (its deadline passed or its wait was aborted).
    void fail_waiter(uint64_t id, const std::exception_ptr& ex) noexcept {
        for (auto it = _waiters.begin(); it != _waiters.end(); ++it) {
            if (it->id == id) {
                it->pr.set_exception(ex);
                // The timer running this callback lives in the waiter: keep it alive past the
                // callback (the previous one kept here has long returned).
                _expired_timer = std::move(it->expiry);
                _waiters.erase(it);
                break;
            }
        }
        // A removed head may let the next waiters through.
        signal(0);
    }

    size_t _count;
    std::deque<waiter> _waiters;
    std::unique_ptr<timer<>> _expired_timer;
    std::exception_ptr _ex;
};

/// Units taken from a semaphore, returned when this object is destroyed (or `return_all()`).
class semaphore_units {
public:
    semaphore_units() noexcept = default;
    semaphore_units(semaphore& s, size_t n) noexcept
        : _sem(&s)
        , _n(n) {}
    semaphore_units(semaphore_units&& o) noexcept
        : _sem(std::exchange(o._sem, nullptr))
        , _n(o._n) {}
    semaphore_units& operator=(semaphore_units&& o) noexcept {
        if (this != &o) {
            return_all();
            _sem = std::exchange(o._sem, nullptr);
            _n = o._n;
        }
        return *this;
    }
    ~semaphore_units() { return_all(); }
    /// Returns the units now.
    void return_all() noexcept {
        if (_sem) {
            _sem->signal(_n);
            _sem = nullptr;
        }
    }
    /// Hands the units back to the caller, who must signal them itself.
    size_t release() noexcept {
        _sem = nullptr;
        return _n;
    }
    size_t count() const noexcept { return _sem ? _n : 0; }

private:
    semaphore* _sem = nullptr;
    size_t _n = 0;
};

/// Waits for `n` units and returns them as an RAII object.
inline future<semaphore_units> get_units(semaphore& s, size_t n = 1) {
    return s.wait(n).then([&s, n] { return semaphore_units(s, n); });
}

/// Runs `func()` holding `n` units of `s`; the units return when its future resolves.
template <typename Func>
auto with_semaphore(semaphore& s, size_t n, Func func) {
    return get_units(s, n).then([func = std::move(func)](semaphore_units u) mutable {
        return futurize_invoke(func).finally([u = std::move(u)] {});
    });
}

} // namespace shoal
