#pragma once

#include "core/metrics.hh"

namespace shoal::net::tcp {

/// Registers the calling shard's TCP counters (`shoal_tcp_*`: connections, bytes, zero-copy and
/// copied receives, paused readers, sends) and the stream layer's copies (`shoal_stream_*`),
/// read from `shard_stats()` when collected. Keep the group on the shard while it runs.
metrics::metric_group publish_metrics();

} // namespace shoal::net::tcp
