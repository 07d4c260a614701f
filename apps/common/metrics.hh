#pragma once

#include "core/app.hh"
#include "core/future.hh"
#include "core/metrics.hh"

#include <cstddef>
#include <functional>
#include <vector>

namespace shoal::apps {

/// What `--prometheus-max-connections` is unless given.
inline constexpr size_t default_metrics_max_connections = 16;

/// Declares `--prometheus-port N` (off unless given; 0 picks a free port),
/// `--prometheus-address` (default 127.0.0.1: loopback only), `--prometheus-max-connections`
/// (the endpoint's own limit, so that scrapers cannot take the descriptors the application
/// serves with), `--prometheus-head-timeout` and `--prometheus-idle-timeout` (seconds).
void add_metrics_options(app& a);

/// The connections the Prometheus endpoint may hold (`--prometheus-max-connections`), 0 when
/// it is off: for an application that sizes its descriptor limit. Throws
/// std::invalid_argument on a bad value.
size_t metrics_max_connections(const app& a);

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
