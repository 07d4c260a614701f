#pragma once

#include <chrono>
#include <cstdint>

namespace shoal {

namespace internal {
/// `need_preempt()` reads the clock once in this many calls.
inline constexpr unsigned preempt_check_interval = 16;
/// A deadline that never passes: off a shard, with no time quota, or while a shard drains.
inline constexpr int64_t no_preempt_deadline = INT64_MAX;
/// `t` in the unit of `preempt_state::deadline`: steady-clock nanoseconds.
inline int64_t steady_ns(std::chrono::steady_clock::time_point t) noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

/// The running shard's task quota as `need_preempt()` sees it (one per thread). The reactor
/// starts the quota when it polls (`deadline` = then + the quota, `raised` lowered);
/// `need_preempt()` reads the steady clock once in `preempt_check_interval` calls and, once
/// the deadline has passed, keeps `raised` up until the next poll.
struct preempt_state {
    bool raised = false;                         ///< the quota ran out
    unsigned countdown = preempt_check_interval; ///< calls left before a clock read
    int64_t deadline = no_preempt_deadline;      ///< steady-clock ns: end of the quota
};
extern constinit thread_local preempt_state preempt_watch;

/// The clock read behind `need_preempt()`, out of line: raises the flag once the deadline has
/// passed, and starts the next countdown.
bool check_preempt_deadline() noexcept;
} // namespace internal

/// True when the running task has used up the shard's task quota (0.5 ms by default, counted
/// from the reactor's last poll) and should let the reactor poll: long loops check it and yield
/// (`co_await yield()`); a `co_await` of a ready future does so on its own. A flag test and a
/// countdown; one call in `internal::preempt_check_interval` reads the steady clock (vDSO, no
/// system call). No timer, no interrupt, no other thread. Always false outside a shard.
inline bool need_preempt() noexcept {
    internal::preempt_state& s = internal::preempt_watch;
    if (s.raised) {
        return true;
    }
    if (--s.countdown != 0) {
        return false;
    }
    return internal::check_preempt_deadline();
}

} // namespace shoal
