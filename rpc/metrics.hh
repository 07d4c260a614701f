#pragma once

#include "core/metrics.hh"

namespace shoal::rpc {

class server;

/// Registers the calling shard's RPC server metrics (`shoal_rpc_server_*`: connections, calls,
/// calls in flight, error replies, protocol errors, handler time), read from `s` when collected.
/// `s` must be this shard's server and outlive the group.
metrics::metric_group publish_metrics(const server& s);

/// Registers the calling shard's RPC client metrics (`shoal_rpc_client_*`: calls, one-way
/// calls, replies, errors, timeouts, calls in flight, bytes, call latency), summed over every
/// `rpc::client` of the shard (`local_client_stats()`).
metrics::metric_group publish_client_metrics();

} // namespace shoal::rpc
