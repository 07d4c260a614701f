#pragma once

// RPC frames over an RDMA connection's message API (see docs/rpc.md, "The RDMA path"):
//   - a frame that fits the peer's receive buffer (and is under the READ threshold) is one
//     message, i.e. one SEND gathered from the header+payload buffer and the attachments
//     (inline when small); it is received as the receive buffer itself and sliced in place;
//   - a larger frame sends its header and a descriptor of its body's memory (exported for
//     remote READ); the receiver READs the body into its own registered memory and releases
//     the sender's export with a tagged immediate (tag `release_tag`). A connection that breaks
//     frees every export it held.
// Messages queued in one reactor iteration are posted under one doorbell by net/rdma.

#include "net/rdma/connection.hh"
#include "rpc/link.hh"

#include <cstdint>
#include <memory>

namespace shoal::rpc {

/// Counters of the RDMA links of the calling shard (all links of the shard together).
struct rdma_link_stats {
    uint64_t frames_sent = 0;            ///< frames sent as one message with their body
    uint64_t remote_bodies_sent = 0;     ///< frames whose body the peer READ
    uint64_t frames_received = 0;        ///< frames received with their body
    uint64_t remote_bodies_received = 0; ///< frames whose body this side READ
    uint64_t bytes_read = 0;             ///< body bytes READ from peers
    uint64_t exports_held = 0;           ///< bodies exported to a peer and not released yet (now)
    uint64_t target_registrations = 0;   ///< READ targets registered outside the pool
};

/// This shard's counters of RDMA links.
const rdma_link_stats& rdma_link_stats_here() noexcept;

/// The immediate tag a receiver releases a sender's body with.
inline constexpr unsigned release_tag = 9;

/// A link over `c`'s message API (taking it and the immediate channel `release_tag`). Frames
/// whose wire size is over `read_threshold` (capped by the largest message) send their body by
/// READ. Throws what `messages()` throws when the connection's SEND/RECV path is taken.
std::unique_ptr<link> rdma_link(net::rdma::connection c, size_t read_threshold);

/// Default `read_threshold` (see docs/rpc.md for the measurement behind it).
inline constexpr size_t default_read_threshold = size_t(64) << 10;

} // namespace shoal::rpc
