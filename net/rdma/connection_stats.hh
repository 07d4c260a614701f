#pragma once

#include <cstdint>

namespace shoal::net::rdma {

/// Counters of one connection.
struct connection_stats {
    uint64_t messages_sent = 0;       ///< stream messages (SEND) posted
    uint64_t bytes_sent = 0;          ///< stream payload bytes posted
    uint64_t inline_sends = 0;        ///< of which inline
    uint64_t zero_copy_sends = 0;     ///< sent from the caller's registered memory
    uint64_t copied_sends = 0;        ///< copied into a pool buffer (coalescing small writes)
    uint64_t gathered_sends = 0;      ///< sent from several pieces in one SEND (scatter-gather)
    uint64_t messages_received = 0;   ///< stream messages received
    uint64_t bytes_received = 0;      ///< stream payload bytes received
    uint64_t ctrl_sent = 0;           ///< credit-only messages sent
    uint64_t ctrl_received = 0;       ///< credit-only messages received
    uint64_t credit_stalls = 0;       ///< times sending stopped for lack of credits
    uint64_t signaled = 0;            ///< signaled send requests
    uint64_t unsignaled = 0;          ///< unsignaled send requests
    uint64_t one_sided_ops = 0;       ///< READ/WRITE/atomics posted
    uint64_t immediates_received = 0; ///< WRITE_WITH_IMM events received
    /// Send credits handed back to the peer after a quiet period (its receives were released).
    uint64_t credits_given_back = 0;
    /// Credits the peer handed back (this side released their receives).
    uint64_t credits_taken_back = 0;
    /// Credits granted but not yet told to the peer that this side withdrew when the peer went
    /// quiet or gave credits back (their receives were released).
    uint64_t credits_withdrawn = 0;
};

} // namespace shoal::net::rdma
