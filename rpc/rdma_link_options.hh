#pragma once

#include <cstddef>

namespace shoal::rpc {

/// How an RDMA link sends and receives large bodies (defaults: see docs/rpc.md). A header of its
/// own so that client and server options hold one without including net/rdma.
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

} // namespace shoal::rpc
