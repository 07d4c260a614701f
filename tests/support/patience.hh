#pragma once

// How long a test waits for what it does not measure, and polling a condition within that time.

#include "core/coroutine.hh"
#include "core/timer.hh"

#include <chrono>

namespace shoal::testing {

/// How long a test waits for something that must happen but is not what it measures (an answer
/// from another shard or a peer, a connection set up, a state polled for, a drain): generous for
/// the sanitizer build in the emulated Soft-RoCE guest on a busy 2-core host, where work takes
/// tens of times longer than natively, and below the ctest TIMEOUT of a test case (120 s for the
/// core and loopback suites). Reaching it is a failure (a hang), never a measurement.
inline constexpr std::chrono::milliseconds patience = std::chrono::seconds(90);

/// Polls `cond` every millisecond until it holds or `timeout` passes; returns whether it held.
template <typename Cond>
future<bool> eventually(Cond cond, std::chrono::milliseconds timeout = patience) {
    auto deadline = steady_clock_type::now() + timeout;
    while (!cond()) {
        if (steady_clock_type::now() > deadline) {
            co_return false;
        }
        co_await sleep(std::chrono::milliseconds(1));
    }
    co_return true;
}

} // namespace shoal::testing
