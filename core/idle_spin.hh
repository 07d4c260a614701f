#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace shoal {

/// How long an idle reactor polls before it sleeps, adapted to whether polling pays. The window
/// halves (down to 0: sleep at once) after an idle period whose spin found nothing, and when the
/// thread was preempted since the last idle period (another runnable thread needs this CPU); it
/// doubles (up to `max`, from `max / 8` when at 0) after a spin that found work, or a sleep that
/// work ended sooner than `max` (a spin would have caught it). Pure logic: the reactor feeds it
/// the preemption count and the durations, so tests drive it without clocks.
class idle_spin {
public:
    using duration = std::chrono::microseconds;

    /// `max`: the longest spin (`reactor_config::idle_poll`); `adaptive` false: always `max`.
    idle_spin(duration max, bool adaptive) noexcept
        : _max(max)
        , _step(std::max(duration(1), max / 8))
        , _window(max)
        , _adaptive(adaptive) {}

    /// An idle period starts; `involuntary_switches` is the thread's count of preemptions so far
    /// (getrusage ru_nivcsw). Returns how long to spin before sleeping.
    duration begin(uint64_t involuntary_switches) noexcept {
        if (_adaptive && involuntary_switches != _switches) {
            if (_switches != unknown) { // the first count is only a baseline
                shrink();
            }
            _switches = involuntary_switches;
        }
        return _window;
    }
    /// The spin ended with work: polling paid.
    void spin_found_work() noexcept { grow(); }
    /// The spin window passed without work: the reactor sleeps.
    void spin_expired() noexcept { shrink(); }
    /// The sleep lasted `slept`: ended sooner than a full spin, it says the spin would have paid.
    void slept(duration slept) noexcept {
        if (slept < _max) {
            grow();
        }
    }
    /// True when the next idle period wants the preemption count (the window is not 0, or may
    /// grow again): the reactor skips the system call otherwise.
    bool wants_switches() const noexcept { return _adaptive && _window.count() > 0; }
    /// The preemption count `begin` last saw (passed again when the reactor skips the call).
    uint64_t switches() const noexcept { return _switches; }
    /// The current window.
    duration window() const noexcept { return _window; }

private:
    void shrink() noexcept {
        if (_adaptive) {
            _window = _window / 2 < _step ? duration(0) : _window / 2;
        }
    }
    void grow() noexcept {
        if (_adaptive) {
            _window = std::min(_max, _window.count() == 0 ? _step : _window * 2);
        }
    }

    static constexpr uint64_t unknown = UINT64_MAX;

    duration _max;
    duration _step;
    duration _window;
    uint64_t _switches = unknown;
    bool _adaptive;
};

} // namespace shoal
