#pragma once

#include "core/preempt.hh"

#include <chrono>

#include <liburing.h>

namespace shoal::internal {

/// A shard's task-quota clock, with no thread of its own: a one-shot io_uring timeout on a small
/// ring of its own. When it expires the kernel posts its completion while the shard runs (on
/// the return from the timer interrupt), moving the ring's CQ tail; `need_preempt()` compares
/// that tail with the head, two loads of shared memory. The reactor consumes the completion when
/// it polls and arms the timer again when it next runs tasks, so an idle shard has no timer
/// armed. A period still running when the shard goes to sleep wakes its thread once inside the
/// kernel (to post the completion), which then sleeps on without running the loop.
class preempt_timer {
public:
    /// A timer of `period`; zero: disabled (`need_preempt()` never rises). Throws
    /// std::system_error when the kernel refuses the ring.
    explicit preempt_timer(std::chrono::microseconds period);
    ~preempt_timer();
    preempt_timer(const preempt_timer&) = delete;
    preempt_timer& operator=(const preempt_timer&) = delete;

    /// The words `need_preempt()` compares for this timer (fixed for its lifetime).
    preempt_words words() const noexcept;
    /// Words that never differ: `need_preempt()` off a shard.
    static preempt_words still_words() noexcept;

    /// Starts a period unless one runs or the timer is disabled (one kernel entry); true when it
    /// started one.
    bool arm() noexcept {
        if (!_armed && _enabled) {
            start();
            return _armed;
        }
        return false;
    }
    /// Takes the expiry, if the period ended: true then, and `need_preempt()` is down again.
    /// Inline: the reactor calls it on every poll, and mostly nothing was posted.
    bool consume() noexcept {
        // Not armed: disabled, or no period running, so nothing can have been posted.
        if (!_armed || !io_uring_cq_ready(&_ring)) {
            return false;
        }
        take_expiry();
        return true;
    }
    /// True when the period that just ended was noticed (`consume()`) a whole period or more
    /// after it ended: the task running then held the shard for longer than one period. One
    /// clock read; call right before `consume()`, and only when `need_preempt()` is up.
    bool noticed_late() const noexcept;

private:
    void start() noexcept;
    void take_expiry() noexcept;

    io_uring _ring{};
    __kernel_timespec _period_ts{};
    std::chrono::steady_clock::duration _period{};
    std::chrono::steady_clock::time_point _armed_at{};
    bool _enabled = false;
    bool _armed = false;
};

} // namespace shoal::internal
