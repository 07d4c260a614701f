#pragma once

#include "core/clock.hh"
#include "core/reactor.hh"

namespace shoal::internal {

/// Base of a waiter that is its own deadline timer (condition variable and shared_future
/// waiters), so that a timed wait costs no separate timer object. `arm_deadline` queues it on
/// the shard's reactor; `deadline_passed` runs once the deadline passes, unless
/// `disarm_deadline` came first. The waiter must be disarmed (or have expired) before it is
/// destroyed.
class deadline_waiter : public timer_base {
public:
    /// Makes `deadline_passed` run at `deadline`; call at most once.
    void arm_deadline(steady_clock_type::time_point deadline) {
        _expiry = deadline;
        local_reactor().add_timer(this);
        _armed = true;
    }
    /// Takes the deadline back if it is armed and has not passed yet.
    void disarm_deadline() noexcept {
        if (_armed) {
            _armed = false;
            local_reactor().del_timer(this);
        }
    }

protected:
    /// Runs from the reactor's timer poll when the deadline passes; may destroy the waiter.
    virtual void deadline_passed() noexcept = 0;

private:
    void expire() noexcept final {
        _armed = false; // the reactor already took the timer off its heap
        deadline_passed();
    }
    bool _armed = false;
};

} // namespace shoal::internal
