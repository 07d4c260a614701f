#pragma once

#include <chrono>

namespace shoal {

/// The precise clock of timers and deadlines.
using steady_clock_type = std::chrono::steady_clock;

/// A cheap clock: `now()` reads a per-shard copy of the steady clock that the reactor refreshes
/// once per loop iteration (and after every sleep), so reading it costs no clock call. Shares
/// its epoch with `steady_clock_type`, so time points convert freely.
class lowres_clock {
public:
    using duration = steady_clock_type::duration;
    using rep = duration::rep;
    using period = duration::period;
    using time_point = std::chrono::time_point<lowres_clock, duration>;
    static constexpr bool is_steady = true;

    /// The time the reactor last read; the steady clock itself off a reactor thread.
    static time_point now() noexcept;

    /// Converts to and from the steady clock (same epoch).
    static steady_clock_type::time_point to_steady(time_point tp) noexcept {
        return steady_clock_type::time_point(tp.time_since_epoch());
    }
    static time_point from_steady(steady_clock_type::time_point tp) noexcept {
        return time_point(tp.time_since_epoch());
    }

    /// Refreshes the calling shard's copy (the reactor calls this); returns the time read.
    static steady_clock_type::time_point refresh() noexcept;
};

} // namespace shoal
