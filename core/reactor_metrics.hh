#pragma once

#include "core/metrics.hh"

namespace shoal {

/// Registers the calling shard's reactor and io_uring counters (`shoal_reactor_*`,
/// `shoal_io_uring_*`): read from `reactor_stats` when collected, so the loop pays nothing.
/// Keep the group on the shard while it runs.
metrics::metric_group publish_reactor_metrics();

} // namespace shoal
