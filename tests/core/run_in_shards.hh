#pragma once

// Test helper: runs a test body on shard 0 of a fresh engine. Shards are not pinned, so tests
// that ctest runs in parallel do not fight over CPUs. Only one engine runs at a time in a process.

#include "core/future.hh"
#include "core/log.hh"
#include "core/smp.hh"

#include <chrono>
#include <functional>

#include <gtest/gtest.h>

namespace shoal::testing {

/// How long a test waits for something that must happen but is not what it measures (an answer
/// from another shard, a reactor going to sleep, a condition polled for): generous for the
/// sanitizer build on a busy 2-core host, and below the ctest TIMEOUT of a core test case
/// (SHOAL_CORE_TEST_TIMEOUT, 120 s). Reaching it is a failure, never a measurement.
inline constexpr std::chrono::seconds patience{90};

/// Starts `smp` unpinned shards with `cfg`, runs `fn()` on shard 0 and returns 0 when its
/// future succeeds. A failure is reported to GoogleTest and turns into a non-zero status, and so
/// is a failed future that the run dropped without looking at it (`ignored_failed_futures`).
inline int run_in_shards(unsigned smp, std::function<future<>()> fn, reactor_config cfg = {}) {
    smp_options opts;
    opts.smp = smp;
    opts.pin = false;
    opts.reactor = cfg;
    uint64_t ignored_before = ignored_failed_futures();
    int rc = run_shards(opts, [fn = std::move(fn)]() -> future<int> {
        return futurize_invoke(fn).then_wrapped([](future<> f) {
            if (f.failed()) {
                ADD_FAILURE() << "test body failed: " << fmt::format("{}", f.get_exception());
                return 1;
            }
            return 0;
        });
    });
    uint64_t ignored = ignored_failed_futures() - ignored_before;
    EXPECT_EQ(ignored, 0u) << "failed futures were dropped without being looked at (see the log)";
    return ignored ? 1 : rc;
}

/// `run_in_shards` on a single shard.
inline int run_in_shard(std::function<future<>()> fn, reactor_config cfg = {}) {
    return run_in_shards(1, std::move(fn), cfg);
}

} // namespace shoal::testing

/// ASSERT_TRUE for coroutine bodies (GoogleTest's ASSERT_* use `return`): records a failure and
/// leaves the coroutine.
#define CO_ASSERT_TRUE(cond)                                                                                 \
    if (!(cond)) {                                                                                           \
        ADD_FAILURE() << "assertion failed: " #cond;                                                         \
        co_return;                                                                                           \
    }
