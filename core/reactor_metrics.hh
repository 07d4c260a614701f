#pragma once

#include "core/metrics.hh"

namespace shoal {

/// Registers the calling shard's reactor, io_uring and cross-shard queue counters
/// (`shoal_reactor_*`, `shoal_io_uring_*`, `shoal_smp_*` with a `peer` label): read from
/// `reactor_stats` and `smp_stats` when collected, so the loop pays nothing extra.
/// Keep the group on the shard while it runs.
metrics::metric_group publish_reactor_metrics();

} // namespace shoal
