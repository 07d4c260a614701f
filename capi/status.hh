#pragma once

// How C++ failures become shoal_status codes and the calling thread's last-error text.

#include <exception>
#include <stdexcept>
#include <string>

namespace shoal::capi {

/// A failure as the C ABI reports it.
struct failure {
    int status;       ///< a shoal_status
    std::string text; ///< what went wrong
};

/// Thrown on a shard when a handle was closed while a call on it waited (SHOAL_ECLOSED).
class closed_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// The status and text of the exception `ep` holds.
failure classify(std::exception_ptr ep) noexcept;

/// Records `text` as the calling thread's last error and returns `status`.
int fail(int status, std::string text) noexcept;

/// Runs `body` (returning a shoal_status) and turns an exception it throws into a status and the
/// thread's last error: nothing escapes into C.
template <typename Body>
int guarded(Body&& body) noexcept {
    try {
        return body();
    } catch (...) {
        auto f = classify(std::current_exception());
        return fail(f.status, std::move(f.text));
    }
}

} // namespace shoal::capi
