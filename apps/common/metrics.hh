#pragma once

#include "core/app.hh"
#include "core/future.hh"
#include "core/metrics.hh"

#include <functional>
#include <vector>

namespace shoal::apps {

/// Declares `--prometheus-port N` (off unless given; 0 picks a free port) and
/// `--prometheus-address` (default 0.0.0.0).
void add_metrics_options(app& a);

/// Runs `main` with metrics: the reactor, io_uring, TCP and RDMA metrics are published on every
/// shard and, when `--prometheus-port` was given, served on shard 0 at
/// `http://ADDRESS:PORT/metrics` (the address is printed on stdout) until `main` resolves.
/// A bad port or an address that cannot be bound ends the program with status 2 and a message.
future<int> with_metrics(const app& a, std::function<future<int>()> main);

/// One metric group per shard, each registered and dropped on its own shard: how an app
/// publishes the metrics of a `sharded<>` service (`kv::publish_metrics(servers.local())`).
class shard_metric_groups {
public:
    /// Runs `make` on every shard, one after the other, and keeps each group on its shard.
    future<> publish(std::function<metrics::metric_group()> make);
    /// Unregisters every group on its shard. Call before the service they read stops.
    future<> clear();

private:
    std::vector<metrics::metric_group> _groups; // index: shard
};

} // namespace shoal::apps
