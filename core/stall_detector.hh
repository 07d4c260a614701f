#pragma once

// Reports a shard that runs one task (or one poll) for too long: the reactor stalls, and every
// other piece of work of the shard waits behind it.
//
// A per-thread POSIX timer on the shard's CPU-time clock (CLOCK_THREAD_CPUTIME_ID) ticks every
// half threshold of CPU the shard uses; its signal handler compares the reactor's progress
// counters (loops, tasks) with those of the previous tick. When two ticks in a row saw no
// progress, the shard has spent at least a threshold of CPU inside one task or poll: the handler
// counts a stall and, rate limited, writes a report with the backtrace of the stalled code to
// standard error. Nothing runs on the reactor's path: no system call, no clock read. An idle
// shard uses no CPU, so its timer does not tick while it sleeps. Time a task spends blocked in
// a system call or descheduled by the host is not CPU time and is not reported (the reactor's
// `long_tasks` counter sees wall-clock time).

#include <chrono>
#include <cstdint>

#include <csignal>
#include <ctime>

namespace shoal {

struct reactor_stats;

namespace internal {

/// The stall detector of one shard; armed and disarmed on the shard's own thread.
class stall_detector {
public:
    /// The signal the detector's timer raises (a realtime signal, handled by the detector).
    static int signal_number() noexcept { return SIGRTMIN + 2; }

    stall_detector() = default;
    ~stall_detector() { disarm(); }
    stall_detector(const stall_detector&) = delete;
    stall_detector& operator=(const stall_detector&) = delete;

    /// Starts watching the calling thread's reactor (`stats`, of shard `shard`): a stall is
    /// `threshold` of CPU time without progress. A zero threshold leaves it off. Throws when
    /// the timer cannot be created.
    void arm(const reactor_stats& stats, unsigned shard, std::chrono::milliseconds threshold);
    /// Stops watching (the timer is deleted; a tick already raised is ignored).
    void disarm() noexcept;

    /// Stalls seen since `arm` (reported or not).
    uint64_t stalls() const noexcept { return _stalls; }
    /// Stalls whose report was left out by the rate limit.
    uint64_t suppressed() const noexcept { return _suppressed; }

private:
    static void on_signal(int, siginfo_t*, void*) noexcept;
    void tick() noexcept;
    void report() noexcept;

    const reactor_stats* _stats = nullptr;
    unsigned _shard = 0;
    std::chrono::milliseconds _threshold{0};
    timer_t _timer{};
    bool _armed = false;
    uint64_t _last_progress = 0;
    unsigned _quiet_ticks = 0; // ticks in a row without progress
    bool _reported = false;    // this stall is counted already
    volatile uint64_t _stalls = 0;
    volatile uint64_t _suppressed = 0;
    int64_t _window_start_ns = 0; // rate limit: reports per minute
    unsigned _window_reports = 0;
};

} // namespace internal
} // namespace shoal
