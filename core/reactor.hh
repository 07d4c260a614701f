#pragma once

#include "core/clock.hh"
#include "core/future.hh"
#include "core/preempt.hh"
#include "core/scheduling.hh"
#include "core/small_pool.hh"
#include "core/task.hh"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include <liburing.h>

namespace shoal {

/// A source of events the reactor checks on every loop iteration, such as the RDMA completion
/// queues or the cross-shard queues. Before the reactor sleeps it asks every poller to arm a
/// wake-up (an fd the shard's io_uring watches, a CQ notification), then re-checks.
class poller {
public:
    virtual ~poller() = default;
    /// Processes whatever is ready without blocking; returns true if it found work.
    virtual bool poll() = 0;
    /// Arms the wake-up that will interrupt the reactor's sleep. Returns false when work is
    /// already pending (the reactor then stays awake and calls `disarm` on what it armed).
    virtual bool try_arm() = 0;
    /// Called after the sleep (or an aborted attempt) for every poller that armed.
    virtual void disarm() = 0;
};

/// Receives one io_uring completion: the object's address is the SQE's user_data. Multishot
/// requests see IORING_CQE_F_MORE in `flags` while more completions will follow.
class io_completion {
public:
    virtual void complete(int result, uint32_t flags) noexcept = 0;

protected:
    ~io_completion() = default;
};

/// Tuning of one reactor, shared by every shard of a run.
struct reactor_config {
    /// Never sleep: spin polling even when idle (lowest latency, one busy core per shard).
    bool poll_mode = false;
    /// How long an idle reactor keeps polling before it arms its pollers and sleeps.
    std::chrono::microseconds idle_poll{200};
    /// Tasks run between two rounds of polling (at most; time may end a round earlier).
    unsigned task_quota = 256;
    /// Task quota in time: a shard's tasks may run this long after the reactor's last poll
    /// before `need_preempt()` rises (it samples the clock, core/preempt.hh); the reactor then
    /// polls after the running task, and ready `co_await`s and the loops of future_util yield.
    /// Zero: no time-based preemption.
    std::chrono::microseconds task_quota_time{500};
    /// Submission queue entries of the shard's io_uring ring.
    unsigned ring_entries = 1024;
    /// Ask for IORING_SETUP_DEFER_TASKRUN (kernel >= 6.1): completions are posted only when the
    /// shard enters the kernel, and each loop iteration enters it at most once, with
    /// io_uring_submit_and_get_events, to submit and collect together. When false, or when the
    /// kernel refuses the flag, the ring uses COOP_TASKRUN and a loop may enter twice (a submit,
    /// then a get_events for completions flagged meanwhile). See `reactor::defers_taskrun()`.
    bool defer_taskrun = true;
};

/// Counters a reactor keeps about itself; read them on the reactor's own shard.
struct reactor_stats {
    uint64_t loops = 0;                ///< loop iterations
    uint64_t tasks_run = 0;            ///< tasks executed
    uint64_t sleeps = 0;               ///< times the reactor went to sleep in io_uring
    uint64_t aborted_sleeps = 0;       ///< sleeps given up because a poller had work when arming
    uint64_t io_submitted = 0;         ///< SQEs handed to the kernel
    uint64_t io_completed = 0;         ///< CQEs processed
    uint64_t io_enter_calls = 0;       ///< io_uring_enter system calls made to submit or reap
    uint64_t polls_entering_twice = 0; ///< polls that entered the kernel twice (submit, then reap)
    uint64_t timers_fired = 0;         ///< timer expirations handled
    uint64_t preemptions = 0;          ///< task rounds cut short by the time quota (need_preempt())
    /// Tasks that held the shard for a whole task-quota period (`task_quota_time`) or more after
    /// the quota ran out: tasks that hold the shard too long (a shard descheduled by the host
    /// for that long counts too).
    uint64_t long_tasks = 0;
    /// Times the reactor found the kernel's CQ-overflow flag up (completions the CQ ring had no
    /// room for, held back by the kernel until the shard entered it again).
    uint64_t cq_overflow_flushes = 0;
};

class timer_base;

/// One shard's event loop: runs tasks, polls io_uring completions, registered pollers and
/// timers, and sleeps in io_uring when there is nothing to do. Everything it owns is touched
/// only by its own thread; `wake()` is the one call other threads may make.
class reactor;
namespace internal {
void set_local_reactor(reactor* r) noexcept;
}

class reactor {
public:
    reactor(unsigned shard_id, const reactor_config& cfg);
    ~reactor();
    reactor(const reactor&) = delete;
    reactor& operator=(const reactor&) = delete;

    /// The shard this reactor runs.
    unsigned shard_id() const noexcept { return _shard_id; }
    const reactor_config& config() const noexcept { return _cfg; }
    const reactor_stats& stats() const noexcept { return _stats; }
    /// True when the ring runs with IORING_SETUP_DEFER_TASKRUN (one kernel entry per loop);
    /// false when it was not asked for or the kernel refused it (the fallback).
    bool defers_taskrun() const noexcept { return _defer_taskrun; }

    /// Queues a task to run on this reactor, in its scheduling group's queue (no allocation).
    void add_task(task* t) noexcept {
        unsigned g = t->scheduling_group_id();
        _queues[g].push_back(t);
        _active |= 1u << g;
    }
    /// True when tasks wait in a queue: called from a running task (or a poller), whether more
    /// work runs before the loop polls again (a sender may leave its send for them to join).
    bool tasks_queued() const noexcept {
        for (unsigned a = _active; a != 0; a &= a - 1) {
            if (!_queues[__builtin_ctz(a)].empty()) {
                return true;
            }
        }
        return false;
    }
    /// CPU time the tasks of scheduling group `sg` have had on this shard, divided by its shares
    /// (counted only while several groups had tasks).
    double group_vruntime(scheduling_group sg) const noexcept { return _vruntime[sg.id()]; }

    /// Returns a free SQE (submitting queued ones first if the ring is full). Fill it and set
    /// its user_data to an `io_completion*`; it is submitted with the loop's next batch.
    io_uring_sqe* get_sqe();

    /// Prepares an SQE with `prep(sqe)` and returns the CQE's result (a negative errno on
    /// failure) as a future. One allocation per call (from the shard's small-object pool).
    template <typename Prep>
    future<int> submit_io(Prep&& prep);

    /// Adds or removes a poller. The reactor does not own it.
    void register_poller(poller* p);
    void unregister_poller(poller* p);

    /// Timer queue (used by `timer`).
    void add_timer(timer_base* t);
    void del_timer(timer_base* t) noexcept;

    /// Runs the loop until `stop()`; then drains what is queued and cancels in-flight I/O.
    void run();
    /// Asks the loop to return once its queued tasks have run. Call on this shard.
    void stop() noexcept;
    bool stopping() const noexcept { return _stopping; }

    /// Wakes this reactor if it sleeps. Safe from any thread; cheap when it is awake.
    void wake() noexcept;
    /// Makes the reactor's next sleep (or the current one) end at once, whatever it is doing now:
    /// always one eventfd write. Safe from any thread; for producers that cannot take part in the
    /// sleep check (threads outside the engine, see core/alien.hh).
    void wake_unconditionally() noexcept;
    /// Marks this reactor as having work posted by another thread, then wakes it if needed.
    /// Callers publish their work first; this provides the fence that pairs with the sleep check.
    void notify_from_other_thread() noexcept;

    /// Registers a check that runs right before sleeping: returning true cancels the sleep
    /// (used by cross-shard queues, whose producers call `notify_from_other_thread`).
    void set_pending_work_check(std::function<bool()> check) { _pending_work_check = std::move(check); }

    /// Number of I/O requests the kernel has not completed yet.
    uint64_t io_in_flight() const noexcept { return _io_in_flight; }
    /// Completions the kernel dropped because the CQ ring was full and it could not hold them
    /// back (the ring's `koverflow` counter; zero unless memory ran out, with IORING_FEAT_NODROP).
    uint64_t cq_dropped() const noexcept { return IO_URING_READ_ONCE(*_ring.cq.koverflow); }

    /// [net/tcp] Low level: the shard's io_uring, only for registering resources with it
    /// (provided-buffer rings: io_uring_register_buf_ring). Never submit or reap on it directly:
    /// use get_sqe(). Added for net/tcp's receive buffer ring.
    io_uring& ring() noexcept { return _ring; }

private:
    friend void internal::set_local_reactor(reactor* r) noexcept;
    class wakeup_reader;
    bool poll_once();
    /// Processes the CQEs in the ring; when `may_enter`, first enters the kernel if it flags
    /// completions it has not posted yet.
    bool reap_completions(bool may_enter = true);
    bool submit_pending();
    /// DEFER_TASKRUN: submits and collects completions in one io_uring_enter, when there is
    /// something to submit or the kernel flags pending completions.
    bool submit_and_get_events();
    /// Expires every timer due at `now`, earliest first.
    void fire_timers(steady_clock_type::time_point now);
    /// Moves the timer at heap index `i` up while it expires before its parent; its new index.
    size_t sift_up(size_t i) noexcept;
    /// Moves the timer at heap index `i` down while a child expires before it.
    void sift_down(size_t i) noexcept;
    void sleep();
    /// Starts a task quota at `now` (`need_preempt()` lowered; it rises `task_quota_time` later).
    void start_quota(steady_clock_type::time_point now) noexcept;
    void run_tasks(unsigned quota);
    /// Runs tasks until none is queued, ignoring the time quota (shutdown).
    void run_all_tasks();
    unsigned pick_group() noexcept;
    void cancel_all_io();

    unsigned _shard_id;
    reactor_config _cfg;
    reactor_stats _stats;
    int64_t _quota_ns;                         // task_quota_time in ns; 0: no time quota
    task_queue _queues[max_scheduling_groups]; // one per scheduling group
    uint32_t _active = 0;                      // bit g: queue g has tasks
    uint32_t _was_active = 0;                  // groups that had tasks at the last contested pick
    double _vruntime[max_scheduling_groups] = {};
    io_uring _ring;
    bool _defer_taskrun = false;
    bool _stopping = false;
    uint64_t _io_in_flight = 0;
    std::vector<poller*> _pollers;
    std::vector<timer_base*> _timers; // binary min-heap on expiry
    int _wake_fd = -1;
    wakeup_reader* _wakeup = nullptr;
    std::function<bool()> _pending_work_check;
    alignas(64) std::atomic<bool> _sleeping{false};
};

/// The reactor of the calling thread; only valid on a shard.
reactor& local_reactor() noexcept;

namespace internal {
/// Installs (or clears) the calling thread's reactor.
void set_local_reactor(reactor* r) noexcept;

/// An io_uring completion that resolves a promise<int> and deletes itself.
class promise_completion final : public io_completion {
public:
    SHOAL_SMALL_POOL_ALLOCATED
    void complete(int result, uint32_t) noexcept override {
        _pr.set_value(result);
        delete this;
    }
    promise<int> _pr;
};
} // namespace internal

template <typename Prep>
future<int> reactor::submit_io(Prep&& prep) {
    io_uring_sqe* sqe = get_sqe(); // first: if it throws, nothing is leaked
    internal::promise_completion* c;
    try {
        c = new internal::promise_completion();
    } catch (...) {
        io_uring_prep_nop(sqe); // the slot is taken: make it harmless
        io_uring_sqe_set_data(sqe, nullptr);
        throw;
    }
    auto f = c->_pr.get_future();
    prep(sqe);
    io_uring_sqe_set_data(sqe, static_cast<io_completion*>(c));
    return f;
}

/// Base of every timer: an expiry in the reactor's heap.
class timer_base {
public:
    virtual ~timer_base() = default;

protected:
    /// Runs when the timer expires; the timer is no longer queued.
    virtual void expire() noexcept = 0;
    steady_clock_type::time_point _expiry{};

private:
    friend class reactor;
    size_t _heap_index = SIZE_MAX;
};

} // namespace shoal
