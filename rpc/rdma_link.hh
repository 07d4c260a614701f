#pragma once

// RPC frames over an RDMA connection's message API (see docs/rpc.md, "The RDMA path"):
//   - a frame that fits the peer's receive buffer (and is under the READ threshold) is one
//     message, i.e. one SEND gathered from the header+payload buffer and the attachments
//     (inline when small); it is received as the receive buffer itself and sliced in place;
//   - a larger frame sends its header and a descriptor of its body's memory (registered for
//     remote READ, through the link's registration cache so memory sent again is not registered
//     again); the receiver READs the body into registered memory of its own cache, in chunks
//     and with several bodies in flight, and releases the sender's hold with a tagged immediate
//     (tag `release_tag`). A connection that breaks frees every hold it had.
// Small frames queued in the same reactor iteration leave together in one message (one SEND),
// and the messages of an iteration are posted under one doorbell by net/rdma.

#include "net/rdma/connection.hh"
#include "rpc/link.hh"
#include "rpc/rdma_link_options.hh"

#include <cstdint>
#include <memory>

namespace shoal::rpc {

/// Counters of the RDMA links of the calling shard (all links of the shard together).
struct rdma_link_stats {
    uint64_t frames_sent = 0;            ///< frames sent in a message with their body
    uint64_t messages_sent = 0;          ///< messages carrying such frames (several frames may share one)
    uint64_t remote_bodies_sent = 0;     ///< frames whose body the peer READ
    uint64_t frames_received = 0;        ///< frames received with their body
    uint64_t messages_received = 0;      ///< messages that carried them
    uint64_t remote_bodies_received = 0; ///< frames whose body this side READ
    uint64_t bytes_read = 0;             ///< body bytes READ from peers
    uint64_t exports_held = 0;           ///< bodies exported to a peer and not released yet (now)
    uint64_t registrations = 0;          ///< ibv_reg_mr calls for bodies (READ targets, exports)
    uint64_t registration_hits = 0;      ///< bodies sent or READ into memory already registered
    uint64_t parallel_reads = 0;         ///< bodies whose READ began while another one's was running
};

/// This shard's counters of RDMA links.
const rdma_link_stats& rdma_link_stats_here() noexcept;

/// The immediate tag a receiver releases a sender's body with.
inline constexpr unsigned release_tag = 9;

/// A link over `c`'s message API (taking it and the immediate channel `release_tag`). Throws
/// what `messages()` throws when the connection's SEND/RECV path is taken.
std::unique_ptr<link> rdma_link(net::rdma::connection c, const rdma_link_options& o);

} // namespace shoal::rpc
