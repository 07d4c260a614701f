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

/// How a link sends and receives large bodies (defaults: see docs/rpc.md).
struct rdma_link_options {
    /// Frames whose wire size is over this send their body by READ (capped by the largest
    /// message the peer receives).
    size_t read_threshold = size_t(64) << 10;
    /// Idle registered bytes the link keeps for its next bodies (its registration cache; 0:
    /// every body is registered for its own use).
    size_t registration_cache = size_t(32) << 20;
    /// A body is READ in pieces of at most this many bytes, posted together.
    size_t read_chunk = size_t(1) << 20;
    /// Body bytes being READ at once: no further message is taken while it is reached (one body
    /// may go past it).
    size_t read_budget = size_t(64) << 20;
    /// READ requests posted at once before no further message is taken (a body's pieces are
    /// posted together, so one body may go past it). 1 = one body at a time: on Soft-RoCE
    /// several bodies in flight were slower (docs/performance.md).
    unsigned max_reads = 1;
    /// Small frames queued in the same reactor iteration share one message (up to the peer's
    /// receive buffer); false: one message per frame.
    bool coalesce = true;
};

/// This shard's counters of RDMA links.
const rdma_link_stats& rdma_link_stats_here() noexcept;

/// The immediate tag a receiver releases a sender's body with.
inline constexpr unsigned release_tag = 9;

/// A link over `c`'s message API (taking it and the immediate channel `release_tag`). Throws
/// what `messages()` throws when the connection's SEND/RECV path is taken.
std::unique_ptr<link> rdma_link(net::rdma::connection c, const rdma_link_options& o);

} // namespace shoal::rpc
