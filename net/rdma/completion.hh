#pragma once

#include <infiniband/verbs.h>

namespace shoal::net::rdma::internal {

/// The target of a work request: its address is the request's `wr_id`, so the CQ poller hands
/// each completion straight to its owner (a send slot of a connection, a posted receive) with
/// one indirect call and no table lookup.
class completion_handler {
public:
    /// The work request completed, successfully or not (see `wc.status`).
    virtual void complete(const ibv_wc& wc) noexcept = 0;

protected:
    ~completion_handler() = default;
};

/// Encodes a handler as a work request id.
inline uint64_t wr_id_of(completion_handler* h) noexcept {
    return reinterpret_cast<uintptr_t>(h);
}

/// Decodes a work request id.
inline completion_handler* handler_of(uint64_t wr_id) noexcept {
    return reinterpret_cast<completion_handler*>(uintptr_t(wr_id));
}

} // namespace shoal::net::rdma::internal
