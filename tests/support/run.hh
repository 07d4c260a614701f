#pragma once

// The engine runner of the test suites: runs a test body on shard 0 of a fresh engine and fails
// the test when the body fails or when the run dropped a failed future nobody looked at.

#include "core/future.hh"
#include "core/smp.hh"

#include <functional>

namespace shoal::testing {

/// Starts `smp` unpinned shards with `cfg`, runs `body()` on shard 0 and returns 0 when its
/// future succeeds. Shards are not pinned, so tests that ctest runs in parallel do not fight over
/// CPUs; only one engine runs at a time in a process. A failed body adds a GoogleTest failure
/// naming the exception and returns 1. So does a run that dropped failed futures without looking
/// at them (`ignored_failed_futures`, each one logged as "exceptional future ignored") beyond
/// those the test declared with `expect_dropped_futures`.
int run_in_shards(unsigned smp, std::function<future<>()> body, reactor_config cfg = {});

/// `run_in_shards` on a single shard.
int run_in_shard(std::function<future<>()> body, reactor_config cfg = {});

/// Declares that the current run drops `count` more failed futures on purpose: the runner then
/// requires exactly that many drops instead of none. Call it from the body (any shard) or before
/// `run_in_shards`, with a comment saying why those failures are dropped.
void expect_dropped_futures(unsigned count) noexcept;

} // namespace shoal::testing

/// ASSERT_TRUE for coroutine bodies (GoogleTest's ASSERT_* use `return`): records a failure and
/// leaves the coroutine.
#define CO_ASSERT_TRUE(cond)                                                                                 \
    if (!(cond)) {                                                                                           \
        ADD_FAILURE() << "assertion failed: " #cond;                                                         \
        co_return;                                                                                           \
    }
