#pragma once

// A device's asynchronous event (ibv_get_async_event), copied so it can be acknowledged at
// once and handed to the shard that owns what it names.

#include <cstdint>

#include <infiniband/verbs.h>

namespace shoal::net::rdma::internal {

/// What an asynchronous event names: a QP (by number), an SRQ (by handle), a port, or the
/// device as a whole.
struct async_event {
    ibv_event_type type = IBV_EVENT_DEVICE_FATAL;
    uint32_t qp_num = 0;    ///< QP events
    ibv_srq* srq = nullptr; ///< SRQ events (compared, never dereferenced after the ack)
    int port = 0;           ///< port events
};

/// Whether `t` names a QP.
inline bool is_qp_event(ibv_event_type t) noexcept {
    switch (t) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        return true;
    default:
        return false;
    }
}

/// Whether `t` names an SRQ.
inline bool is_srq_event(ibv_event_type t) noexcept {
    return t == IBV_EVENT_SRQ_ERR || t == IBV_EVENT_SRQ_LIMIT_REACHED;
}

} // namespace shoal::net::rdma::internal
