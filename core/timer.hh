#pragma once

#include "core/abort_source.hh"
#include "core/clock.hh"
#include "core/reactor.hh"

#include <chrono>
#include <functional>
#include <optional>

namespace shoal {

/// A callback that runs on its shard's reactor at a point in time, once or periodically.
/// `Clock` is `steady_clock_type` or `lowres_clock`. The callback runs from the reactor's timer
/// poll; it should be short (set a promise, schedule work). A timer must be cancelled or fired
/// before it is destroyed on its own shard; the destructor cancels it.
template <typename Clock = steady_clock_type>
class timer final : public timer_base {
public:
    using time_point = typename Clock::time_point;
    using duration = typename Clock::duration;

    timer() = default;
    explicit timer(std::function<void()> callback)
        : _callback(std::move(callback)) {}
    timer(const timer&) = delete;
    timer& operator=(const timer&) = delete;
    ~timer() override { cancel(); }

    /// Sets what runs at expiry.
    void set_callback(std::function<void()> callback) { _callback = std::move(callback); }

    /// Arms for `when`, optionally repeating every `period`. The timer must not be armed.
    void arm(time_point when, std::optional<duration> period = {}) {
        _period = period;
        if constexpr (std::is_same_v<Clock, lowres_clock>) {
            _expiry = lowres_clock::to_steady(when);
        } else {
            _expiry = when;
        }
        _armed = true;
        local_reactor().add_timer(this);
    }
    /// Arms for `delta` from now.
    void arm(duration delta) { arm(Clock::now() + delta); }
    /// Arms to fire every `period`, first in one period.
    void arm_periodic(duration period) { arm(Clock::now() + period, period); }
    /// Cancels if armed, then arms.
    void rearm(time_point when, std::optional<duration> period = {}) {
        cancel();
        arm(when, period);
    }
    /// Disarms; returns true if the timer was armed.
    bool cancel() noexcept {
        if (!_armed) {
            return false;
        }
        _armed = false;
        local_reactor().del_timer(this);
        return true;
    }
    bool armed() const noexcept { return _armed; }

private:
    void expire() noexcept override {
        _armed = false;
        if (_period) {
            _expiry += *_period;
            _armed = true;
            local_reactor().add_timer(this);
        }
        if (_callback) {
            _callback();
        }
    }

    std::function<void()> _callback;
    std::optional<duration> _period;
    bool _armed = false;
};

/// Resolves after `d` has passed on the steady clock.
future<> sleep(steady_clock_type::duration d);

/// Resolves after `d` has passed, measured on the low-resolution clock.
future<> sleep_lowres(lowres_clock::duration d);

/// Resolves after `d` has passed, or fails with the abort's reason (`abort_requested_exception`
/// by default) as soon as `as` is aborted; the timer is then cancelled. Fails at once if `as`
/// was already aborted.
future<> sleep_abortable(steady_clock_type::duration d, abort_source& as);

} // namespace shoal
