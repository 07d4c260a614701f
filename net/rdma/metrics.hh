#pragma once

#include "core/metrics.hh"

namespace shoal::net::rdma {

/// Registers the calling shard's RDMA counters (`shoal_rdma_*`: completion queue polls, events
/// and completions, sends posted, connections, SRQ and device events, registered pool bytes and
/// refusals), read from the shard's `shard_context` when collected. While RDMA is not started
/// on the shard the series are absent. Keep the group on the shard while it runs.
metrics::metric_group publish_metrics();

} // namespace shoal::net::rdma
