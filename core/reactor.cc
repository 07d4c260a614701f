#include "core/reactor.hh"

#include "core/log.hh"
#include "core/timer.hh"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <system_error>

#include <sys/eventfd.h>
#include <unistd.h>

namespace shoal {

namespace {
thread_local reactor* tl_reactor = nullptr;
thread_local lowres_clock::time_point tl_lowres_now{};
logger reactor_log("reactor");

/// Flags tried in order until the kernel accepts one set: completions are only run when the
/// shard enters the kernel (no interrupts of the reactor thread), and only one thread submits.
/// The first set (DEFER_TASKRUN, kernel >= 6.1) is tried only when the configuration asks for it.
const unsigned defer_taskrun_flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
                                     IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_SUBMIT_ALL;
const unsigned ring_flag_sets[] = {
    defer_taskrun_flags,
    IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG |
        IORING_SETUP_SUBMIT_ALL,
    IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
    0,
};

/// Accounts for one io_uring_enter that returned `rc` (SQEs submitted, or -errno) from `call`;
/// returns whether it submitted anything.
bool account_enter(int rc, const char* call, reactor_stats& stats, uint64_t& in_flight) noexcept {
    ++stats.io_enter_calls;
    if (rc < 0) {
        if (rc != -EAGAIN && rc != -EBUSY && rc != -EINTR) {
            reactor_log.error("{} failed: {}", call, std::strerror(-rc));
        }
        return false;
    }
    stats.io_submitted += unsigned(rc);
    in_flight += unsigned(rc);
    return rc > 0;
}
} // namespace

reactor& local_reactor() noexcept {
    return *tl_reactor;
}

void internal::set_local_reactor(reactor* r) noexcept {
    tl_reactor = r;
    internal::preempt_watch = {}; // no deadline until the reactor polls
    lowres_clock::refresh();
}

lowres_clock::time_point lowres_clock::now() noexcept {
    if (!tl_reactor) {
        return from_steady(steady_clock_type::now());
    }
    return tl_lowres_now;
}

steady_clock_type::time_point lowres_clock::refresh() noexcept {
    // What steady_clock::now() reads (CLOCK_MONOTONIC), without the library call around
    // clock_gettime: one call less in every loop iteration.
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const steady_clock_type::time_point now(std::chrono::seconds(ts.tv_sec) +
                                            std::chrono::nanoseconds(ts.tv_nsec));
    tl_lowres_now = from_steady(now);
    return now;
}

void schedule(task* t) noexcept {
    tl_reactor->add_task(t);
}

/// Keeps one read of the wake-up eventfd in the ring; its completion ends a sleep.
class reactor::wakeup_reader final : public io_completion {
public:
    explicit wakeup_reader(reactor& r)
        : _r(r) {}
    void arm() {
        io_uring_sqe* sqe = _r.get_sqe();
        io_uring_prep_read(sqe, _r._wake_fd, &_value, sizeof(_value), 0);
        io_uring_sqe_set_data(sqe, static_cast<io_completion*>(this));
        _pending = true;
    }
    void complete(int result, uint32_t) noexcept override {
        _pending = false;
        if (result == -ECANCELED || _r._stopping) {
            return;
        }
        try {
            arm();
        } catch (...) {
            reactor_log.error("cannot re-arm the wake-up read: {}", std::current_exception());
        }
    }
    bool pending() const noexcept { return _pending; }

private:
    reactor& _r;
    uint64_t _value = 0;
    bool _pending = false;
};

reactor::reactor(unsigned shard_id, const reactor_config& cfg)
    : _shard_id(shard_id)
    , _cfg(cfg)
    , _quota_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(cfg.task_quota_time).count()) {
    int rc = -EINVAL;
    for (unsigned flags : ring_flag_sets) {
        if (flags == defer_taskrun_flags && !_cfg.defer_taskrun) {
            continue;
        }
        io_uring_params p{};
        p.flags = flags | IORING_SETUP_CQSIZE;
        p.cq_entries = _cfg.ring_entries * 4;
        rc = io_uring_queue_init_params(_cfg.ring_entries, &_ring, &p);
        if (rc != -EINVAL) {
            _defer_taskrun = rc == 0 && flags == defer_taskrun_flags;
            break;
        }
    }
    if (rc == 0 && _cfg.defer_taskrun && !_defer_taskrun && shard_id == 0) {
        reactor_log.info("io_uring: the kernel refused IORING_SETUP_DEFER_TASKRUN; using COOP_TASKRUN "
                         "(two kernel entries per busy loop instead of one)");
    }
    if (rc < 0) {
        throw std::system_error(-rc, std::system_category(), "io_uring_queue_init");
    }
    // Blocking on purpose: io_uring waits on it instead of failing the read with EAGAIN.
    _wake_fd = ::eventfd(0, EFD_CLOEXEC);
    if (_wake_fd < 0) {
        int e = errno;
        io_uring_queue_exit(&_ring);
        throw std::system_error(e, std::system_category(), "eventfd");
    }
    _wakeup = new wakeup_reader(*this);
}

reactor::~reactor() {
    if (_wakeup && !_wakeup->pending()) {
        delete _wakeup;
    } else if (_wakeup) {
        reactor_log.warn("wake-up read still in flight at teardown");
    }
    io_uring_queue_exit(&_ring);
    ::close(_wake_fd);
}

io_uring_sqe* reactor::get_sqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&_ring);
    if (!sqe) {
        submit_pending();
        sqe = io_uring_get_sqe(&_ring);
        if (!sqe) {
            throw std::runtime_error("io_uring submission queue full");
        }
    }
    return sqe;
}

bool reactor::submit_pending() {
    unsigned ready = io_uring_sq_ready(&_ring);
    if (ready == 0) {
        return false;
    }
    return account_enter(io_uring_submit(&_ring), "io_uring_submit", _stats, _io_in_flight);
}

bool reactor::submit_and_get_events() {
    unsigned ready = io_uring_sq_ready(&_ring);
    unsigned kflags = IO_URING_READ_ONCE(*_ring.sq.kflags);
    if (ready == 0 && !(kflags & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW))) {
        return false;
    }
    _stats.cq_overflow_flushes += (kflags & IORING_SQ_CQ_OVERFLOW) != 0;
    return account_enter(io_uring_submit_and_get_events(&_ring), "io_uring_submit_and_get_events", _stats,
                         _io_in_flight);
}

bool reactor::reap_completions(bool may_enter) {
    // The kernel posts completions only when this thread enters it (COOP_TASKRUN or
    // DEFER_TASKRUN); the TASKRUN flag says some are waiting.
    if (may_enter) {
        unsigned kflags = IO_URING_READ_ONCE(*_ring.sq.kflags);
        if (kflags & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)) {
            _stats.cq_overflow_flushes += (kflags & IORING_SQ_CQ_OVERFLOW) != 0;
            io_uring_get_events(&_ring);
            ++_stats.io_enter_calls;
        }
    }
    unsigned head;
    unsigned n = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&_ring, head, cqe) {
        ++n;
        auto* c = static_cast<io_completion*>(io_uring_cqe_get_data(cqe));
        int res = cqe->res;
        uint32_t flags = cqe->flags;
        if (!(flags & IORING_CQE_F_MORE)) {
            --_io_in_flight;
        }
        if (c) {
            c->complete(res, flags);
        }
    }
    if (n) {
        io_uring_cq_advance(&_ring, n);
        _stats.io_completed += n;
    }
    return n > 0;
}

void reactor::register_poller(poller* p) {
    _pollers.push_back(p);
}

void reactor::unregister_poller(poller* p) {
    _pollers.erase(std::remove(_pollers.begin(), _pollers.end(), p), _pollers.end());
}

// --- timers: a binary min-heap on expiry, each timer knows its index for O(log n) removal.

void reactor::add_timer(timer_base* t) {
    t->_heap_index = _timers.size();
    _timers.push_back(t);
    sift_up(t->_heap_index);
}

size_t reactor::sift_up(size_t i) noexcept {
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!(_timers[i]->_expiry < _timers[parent]->_expiry)) {
            break;
        }
        std::swap(_timers[i], _timers[parent]);
        _timers[i]->_heap_index = i;
        _timers[parent]->_heap_index = parent;
        i = parent;
    }
    return i;
}

void reactor::sift_down(size_t i) noexcept {
    for (;;) {
        size_t l = 2 * i + 1;
        size_t r = l + 1;
        size_t m = i;
        if (l < _timers.size() && _timers[l]->_expiry < _timers[m]->_expiry) {
            m = l;
        }
        if (r < _timers.size() && _timers[r]->_expiry < _timers[m]->_expiry) {
            m = r;
        }
        if (m == i) {
            return;
        }
        std::swap(_timers[i], _timers[m]);
        _timers[i]->_heap_index = i;
        _timers[m]->_heap_index = m;
        i = m;
    }
}

void reactor::del_timer(timer_base* t) noexcept {
    size_t i = t->_heap_index;
    if (i >= _timers.size() || _timers[i] != t) {
        return;
    }
    t->_heap_index = SIZE_MAX;
    timer_base* last = _timers.back();
    _timers.pop_back();
    if (i == _timers.size()) {
        return;
    }
    _timers[i] = last;
    last->_heap_index = i;
    // The last timer took the removed one's place: it moves up or down, never both.
    sift_down(sift_up(i));
}

void reactor::fire_timers(steady_clock_type::time_point now) {
    while (!_timers.empty() && _timers.front()->_expiry <= now) {
        timer_base* t = _timers.front();
        del_timer(t);
        ++_stats.timers_fired;
        t->expire();
    }
}

// --- the loop

// Inlined into `run`'s loop (as `poll_once`): two calls less per iteration.
[[gnu::always_inline]] inline void reactor::run_tasks(unsigned quota) {
    while (quota && _active) {
        // One group with tasks (the common case): no choice, no clock read.
        bool contested = (_active & (_active - 1)) != 0;
        unsigned g = contested ? pick_group() : unsigned(__builtin_ctz(_active));
        steady_clock_type::time_point start;
        if (contested) {
            start = steady_clock_type::now();
        }
        internal::current_scheduling_group_id = g;
        task_queue& q = _queues[g];
        bool preempted = false;
        while (quota && !q.empty()) {
            --quota;
            task* t = q.pop_front();
            ++_stats.tasks_run;
            t->run_and_dispose();
            if (need_preempt()) {
                // Noticed a whole period after the quota ran out: this task held the shard
                // for longer than one task-quota period (one clock read per cut round; the
                // flag may have gone up long before this task ended).
                _stats.long_tasks +=
                    internal::steady_ns(steady_clock_type::now()) - internal::preempt_watch.deadline >=
                    _quota_ns;
                preempted = true;
                break;
            }
        }
        if (q.empty()) {
            _active &= ~(1u << g);
        }
        if (contested) {
            auto ns = std::chrono::duration<double, std::nano>(steady_clock_type::now() - start).count();
            _vruntime[g] += ns / double(internal::scheduling_group_shares(g));
        }
        if (preempted) {
            ++_stats.preemptions;
            break;
        }
    }
    internal::current_scheduling_group_id = 0;
}

unsigned reactor::pick_group() noexcept {
    // A group that just got tasks does not bank the time it spent idle: it starts level with the
    // least-served group that kept running, as in CFS.
    uint32_t fresh = _active & ~_was_active;
    uint32_t kept = _active & _was_active;
    if (fresh && kept) {
        double floor = 0;
        bool first = true;
        for (uint32_t m = kept; m; m &= m - 1) {
            unsigned g = unsigned(__builtin_ctz(m));
            floor = first ? _vruntime[g] : std::min(floor, _vruntime[g]);
            first = false;
        }
        for (uint32_t m = fresh; m; m &= m - 1) {
            unsigned g = unsigned(__builtin_ctz(m));
            _vruntime[g] = std::max(_vruntime[g], floor);
        }
    }
    _was_active = _active;
    unsigned best = unsigned(__builtin_ctz(_active));
    for (uint32_t m = _active & (_active - 1); m; m &= m - 1) {
        unsigned g = unsigned(__builtin_ctz(m));
        if (_vruntime[g] < _vruntime[best]) {
            best = g;
        }
    }
    return best;
}

void reactor::start_quota(steady_clock_type::time_point now) noexcept {
    internal::preempt_state& ps = internal::preempt_watch;
    ps.raised = false;
    ps.countdown = internal::preempt_check_interval;
    ps.deadline = _quota_ns > 0 ? internal::steady_ns(now) + _quota_ns : internal::no_preempt_deadline;
}

[[gnu::always_inline]] inline bool reactor::poll_once() {
    // The quota of the next task round counts from here (one clock read per iteration, shared
    // with the low-resolution clock).
    start_quota(lowres_clock::refresh());
    bool work = false;
    uint64_t enters = _stats.io_enter_calls;
    if (_defer_taskrun) {
        // One kernel entry at most: submit and collect together. Completions flagged after it
        // wait for the next iteration's entry.
        // Each call is skipped when it has nothing to do (the common case of a busy loop with
        // no I/O): no call, no kernel entry.
        if (io_uring_sq_ready(&_ring) != 0 ||
            (IO_URING_READ_ONCE(*_ring.sq.kflags) & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW))) {
            work |= submit_and_get_events();
        }
        if (io_uring_cq_ready(&_ring) != 0) {
            work |= reap_completions(false);
        }
    } else {
        work |= submit_pending();
        work |= reap_completions();
    }
    _stats.polls_entering_twice += _stats.io_enter_calls - enters > 1;
    // By index: a poller may register or unregister pollers while it polls (cross-shard calls
    // run inside the smp poller, so a service started on this shard registers its pollers here).
    for (size_t i = 0; i < _pollers.size(); ++i) {
        work |= _pollers[i]->poll();
    }
    // The heap's front is checked here, so a loop without a due timer makes no call.
    if (auto now = lowres_clock::to_steady(tl_lowres_now);
        !_timers.empty() && _timers.front()->_expiry <= now) {
        fire_timers(now);
        work = true;
    }
    return work;
}

void reactor::sleep() {
    size_t armed = 0;
    bool abort = false;
    for (; armed < _pollers.size(); ++armed) {
        if (!_pollers[armed]->try_arm()) {
            abort = true;
            break;
        }
    }
    if (!abort) {
        if (!_wakeup->pending()) {
            _wakeup->arm();
        }
        _sleeping.store(true, std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        abort = _pending_work_check && _pending_work_check();
    }
    if (abort) {
        ++_stats.aborted_sleeps;
    } else {
        __kernel_timespec ts{};
        __kernel_timespec* tsp = nullptr;
        if (!_timers.empty()) {
            auto delta = _timers.front()->_expiry - steady_clock_type::now();
            auto ns =
                std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(delta).count());
            ts.tv_sec = ns / 1000000000;
            ts.tv_nsec = ns % 1000000000;
            tsp = &ts;
        }
        ++_stats.sleeps;
        unsigned to_submit = io_uring_sq_ready(&_ring);
        io_uring_cqe* cqe = nullptr;
        int rc = io_uring_submit_and_wait_timeout(&_ring, &cqe, 1, tsp, nullptr);
        ++_stats.io_enter_calls;
        // Submission happens even when the wait times out (-ETIME): count what left the queue.
        unsigned submitted = to_submit - io_uring_sq_ready(&_ring);
        _stats.io_submitted += submitted;
        _io_in_flight += submitted;
        if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            reactor_log.error("io_uring wait failed: {}", std::strerror(-rc));
        }
    }
    _sleeping.store(false, std::memory_order_relaxed);
    for (size_t i = 0; i < armed; ++i) {
        _pollers[i]->disarm();
    }
}

void reactor::run() {
    auto idle_since = steady_clock_type::now();
    start_quota(idle_since);
    bool idle = false;
    while (!_stopping || _active) {
        ++_stats.loops;
        run_tasks(_cfg.task_quota);
        bool work = poll_once();
        if (work || _active) {
            idle = false;
            continue;
        }
        if (_stopping || _cfg.poll_mode) {
            continue;
        }
        auto now = steady_clock_type::now();
        if (!idle) {
            idle = true;
            idle_since = now;
            continue;
        }
        if (now - idle_since >= _cfg.idle_poll) {
            sleep();
            start_quota(lowres_clock::refresh());
            idle = false;
        }
    }
    cancel_all_io();
}

void reactor::cancel_all_io() {
    // Cancel what the kernel still holds and let the completions (errors) flow through their
    // owners, so nothing is leaked and nothing completes into freed memory after we return.
    submit_pending();
    if (_io_in_flight == 0) {
        return;
    }
    submit_pending();
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
    io_uring_sqe_set_data(sqe, nullptr);
    submit_pending();
    auto deadline = steady_clock_type::now() + std::chrono::seconds(2);
    while (_io_in_flight > 0 && steady_clock_type::now() < deadline) {
        __kernel_timespec ts{0, 10'000'000};
        io_uring_cqe* cqe = nullptr;
        io_uring_wait_cqe_timeout(&_ring, &cqe, &ts);
        reap_completions();
        run_all_tasks();
        submit_pending();
    }
    // The last completions' tasks (and whatever they queue) run before the shard is left.
    run_all_tasks();
    if (_io_in_flight > 0) {
        reactor_log.warn("{} I/O requests still in flight at shutdown", _io_in_flight);
    }
}

void reactor::run_all_tasks() {
    // No time quota at shutdown: ready co_awaits that requeue themselves and tasks that queue
    // others all run to the end.
    internal::preempt_watch = {}; // no deadline
    while (_active) {
        run_tasks(UINT32_MAX);
    }
}

void reactor::stop() noexcept {
    _stopping = true;
}

void reactor::wake() noexcept {
    if (_sleeping.load(std::memory_order_relaxed)) {
        uint64_t one = 1;
        ssize_t n = ::write(_wake_fd, &one, sizeof(one));
        (void)n;
    }
}

void reactor::wake_unconditionally() noexcept {
    uint64_t one = 1;
    ssize_t n = ::write(_wake_fd, &one, sizeof(one));
    (void)n;
}

void reactor::notify_from_other_thread() noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    wake();
}

} // namespace shoal
