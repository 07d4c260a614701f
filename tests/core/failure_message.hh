#pragma once

// A test helper: waits for a future expected to fail and returns its exception's message.

#include "core/future.hh"
#include "test_failures.hh"

#include <string>
#include <utility>

namespace shoal::testing {

/// Resolves, once `f` does, with the message of its exception (consuming it); records a test
/// failure when `f` succeeds.
template <typename T>
future<std::string> failure_message(future<T> f) {
    return std::move(f).then_wrapped([](future<T> r) { return failure_of(r); });
}

} // namespace shoal::testing
