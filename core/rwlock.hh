#pragma once

#include "core/abort_source.hh"
#include "core/clock.hh"
#include "core/future.hh"
#include "core/semaphore.hh"

#include <cstddef>
#include <limits>
#include <type_traits>
#include <utility>

namespace shoal {

/// A readers-writer lock for one shard, in the manner of `std::shared_mutex`: any number of
/// readers, or one writer. Waiters are served in FIFO order, so a waiting writer holds back the
/// readers that come after it and is not starved. Built on a `semaphore` holding `max_readers`
/// units: a reader takes one, a writer all of them, so waits with a deadline or an
/// `abort_source` behave as the semaphore's (`semaphore_timed_out`, the abort's reason), and a
/// pending lock costs what a semaphore wait costs. `for_read()` and `for_write()` give the two
/// sides as lockables (`lock()`, `unlock()`, `try_lock()`) for `with_lock`. Destroying the lock
/// fails its waiters with `broken_semaphore`. Not thread-safe by design.
class rwlock {
public:
    /// How many readers may hold the lock at once.
    static constexpr size_t max_readers = std::numeric_limits<uint32_t>::max();

    /// RAII ownership of a read or write lock, released on destruction.
    using holder = semaphore_units;

    /// One side of the lock (reading or writing) as a lockable.
    class side {
    public:
        /// Waits for the lock.
        future<> lock() { return _lock._sem.wait(_units); }
        /// Waits for the lock until `deadline` (then fails with `semaphore_timed_out`).
        future<> lock(steady_clock_type::time_point deadline) { return _lock._sem.wait(deadline, _units); }
        /// Waits for the lock until `as` is aborted (then fails with the abort's reason).
        future<> lock(abort_source& as) { return _lock._sem.wait(as, _units); }
        /// Takes the lock if free right now (and nobody waits); returns whether it did.
        bool try_lock() noexcept { return _lock._sem.try_wait(_units); }
        /// Releases the lock taken through this side.
        void unlock() noexcept { _lock._sem.signal(_units); }
        /// Waits for the lock and returns it as a `holder`.
        future<holder> hold() { return get_units(_lock._sem, _units); }

    private:
        friend class rwlock;
        side(rwlock& l, size_t units) noexcept
            : _lock(l)
            , _units(units) {}
        rwlock& _lock;
        size_t _units;
    };

    rwlock() noexcept = default;
    rwlock(const rwlock&) = delete;
    rwlock& operator=(const rwlock&) = delete;

    /// The reading side: shared with other readers.
    side& for_read() noexcept { return _read; }
    /// The writing side: exclusive.
    side& for_write() noexcept { return _write; }

    /// Waits for a read lock.
    future<> read_lock() { return _read.lock(); }
    /// Releases a read lock.
    void read_unlock() noexcept { _read.unlock(); }
    /// Waits for the write lock.
    future<> write_lock() { return _write.lock(); }
    /// Releases the write lock.
    void write_unlock() noexcept { _write.unlock(); }
    /// Takes a read lock if possible right now.
    bool try_read_lock() noexcept { return _read.try_lock(); }
    /// Takes the write lock if possible right now.
    bool try_write_lock() noexcept { return _write.try_lock(); }
    /// Waits for a read lock, returned as a holder.
    future<holder> hold_read_lock() { return _read.hold(); }
    /// Waits for the write lock, returned as a holder.
    future<holder> hold_write_lock() { return _write.hold(); }

    /// True while a reader or the writer holds the lock (or somebody waits for it).
    bool locked() const noexcept { return _sem.available_units() < max_readers || _sem.waiters() > 0; }

private:
    semaphore _sem{max_readers};
    side _read{*this, 1};
    side _write{*this, max_readers};
};

/// Runs `func()` holding `lock` (a lockable: `lock()` returning a future, `unlock()`), and
/// releases it when `func`'s future resolves, whatever the outcome. If taking the lock fails,
/// `func` does not run.
template <typename Lock, typename Func>
auto with_lock(Lock& lock, Func func) -> futurize_t<std::invoke_result_t<Func>> {
    return lock.lock().then([&lock, func = std::move(func)]() mutable {
        return futurize_invoke(func).finally([&lock] { lock.unlock(); });
    });
}

} // namespace shoal
