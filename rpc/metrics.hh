#pragma once

#include "core/metrics.hh"

namespace shoal::rpc {

class server;

/// Registers the calling shard's RPC server metrics (`shoal_rpc_server_*`: connections, calls,
/// calls in flight, error replies, protocol errors), read from `s.stats()` when collected. `s`
/// must be this shard's server and outlive the group.
metrics::metric_group publish_metrics(const server& s);

} // namespace shoal::rpc
