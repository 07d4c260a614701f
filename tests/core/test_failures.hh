#pragma once

// Test helpers for failure paths: an exception type of the tests' own, and the message a
// failed future carries.

#include "core/future.hh"

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include <gtest/gtest.h>

namespace shoal::testing {

/// An exception no library code throws, so a test can tell its own failures apart.
struct test_error : std::runtime_error {
    explicit test_error(const std::string& what)
        : std::runtime_error(what) {}
};

/// The message of a failed future's exception (consumes it); records a test failure when the
/// future did not fail.
template <typename T>
std::string failure_of(future<T>& f) {
    EXPECT_TRUE(f.failed());
    try {
        std::rethrow_exception(f.get_exception());
    } catch (const std::exception& e) {
        return e.what();
    }
    return "?";
}

/// Resolves, once `f` does, with the message of its exception (consuming it); records a test
/// failure when `f` succeeds.
template <typename T>
future<std::string> failure_message(future<T> f) {
    return std::move(f).then_wrapped([](future<T> r) { return failure_of(r); });
}

} // namespace shoal::testing
