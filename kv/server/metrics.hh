#pragma once

#include "core/metrics.hh"

namespace shoal::kv {

class server;

/// Registers the calling shard's KV metrics (`shoal_kv_*`): memcached's store counters (gets,
/// hits, misses, sets, evictions, ...), items and memory, and the server's connections and bytes,
/// read from `s` when collected. `s` must be this shard's server and outlive the group.
metrics::metric_group publish_metrics(server& s);

} // namespace shoal::kv
