#pragma once

// A test helper: lets the reactor run what is queued before the test looks at the outcome.

#include "core/future.hh"
#include "core/future_util.hh"

namespace shoal::testing {

/// Lets the reactor run the tasks queued so far, `rounds` yields deep (continuations scheduled by
/// those tasks run too).
inline future<> run_queued_tasks(int rounds = 3) {
    for (int i = 0; i < rounds; ++i) {
        co_await yield();
    }
}

} // namespace shoal::testing
