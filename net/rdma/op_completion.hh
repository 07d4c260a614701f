#pragma once

#include <exception>

namespace shoal::net::rdma {

/// Takes the outcome of a one-sided operation by call instead of by future (the `read` and
/// `write` of `connection` that take one): the CQ poller calls it straight from the operation's
/// completion, with no promise, future or continuation task in between. For callers that turn
/// the completion into a result of their own, such as a GET that validates what it READ.
class op_completion {
public:
    /// The operation finished; `error` is null when it succeeded. Called exactly once, on the
    /// connection's shard: from the completion queue's poll, or before the issuing call returns
    /// when the operation cannot start (a closed connection, a span outside the region). It may
    /// issue operations on the connection, close it, or destroy this object.
    virtual void complete(std::exception_ptr error) noexcept = 0;

protected:
    ~op_completion() = default;
};

} // namespace shoal::net::rdma
