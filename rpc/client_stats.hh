#pragma once

#include "core/metrics.hh"

#include <cstdint>

namespace shoal::rpc {

/// Counters of every `rpc::client` on one shard, kept by the clients with plain increments
/// (shard-local: no atomics) and published by `publish_client_metrics`.
struct client_stats {
    uint64_t calls = 0;      ///< calls sent that wait for a reply
    uint64_t one_way = 0;    ///< one-way calls sent
    uint64_t replies = 0;    ///< replies received in time (values and errors)
    uint64_t errors = 0;     ///< calls that failed: error reply, timeout or connection lost
    uint64_t timeouts = 0;   ///< of which timed out waiting for the reply
    uint64_t in_flight = 0;  ///< calls waiting for their reply now
    uint64_t sent_bytes = 0; ///< frame bytes of calls handed to the connections (headers included)
    /// Seconds from sending a call to its reply (successful or error reply): 1 us .. 8 s.
    metrics::histogram latency = metrics::histogram::exponential(1e-6, 2, 24);
};

/// The calling shard's client counters.
client_stats& local_client_stats() noexcept;

} // namespace shoal::rpc
