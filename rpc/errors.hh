#pragma once

#include <stdexcept>
#include <string>

namespace shoal::rpc {

/// Bytes that do not form a valid frame or value: bad magic or version, a length past the
/// limit or past the end of the data, an unknown variant index, an invalid bool... The
/// connection that produced them is closed; nothing is read out of bounds.
class protocol_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A call failed because its connection is gone (closed, reset, server stopped) or could not be
/// made.
class connection_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A call got no reply before its deadline (the handler may still run on the server).
class timeout_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// The handler threw: `type_name()` is the exception's type as the server saw it, `what()`
/// its message.
class remote_error : public std::runtime_error {
public:
    /// An error of type `type` with message `message`.
    remote_error(std::string type, const std::string& message)
        : std::runtime_error(message)
        , _type(std::move(type)) {}
    /// The exception's type on the server (e.g. "std::invalid_argument").
    const std::string& type_name() const noexcept { return _type; }

private:
    std::string _type;
};

/// The server has no handler for the called verb.
class unknown_verb_error : public remote_error {
public:
    using remote_error::remote_error;
};

/// The server's handler for the verb takes or returns other types than the caller's
/// declaration (their signature hashes differ); nothing was deserialized.
class signature_mismatch_error : public remote_error {
public:
    using remote_error::remote_error;
};

/// A handler was registered under a verb id that another handler already has.
class duplicate_verb_error : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

} // namespace shoal::rpc
