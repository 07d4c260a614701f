#pragma once

#include "net/http/server.hh"

#include <string>

namespace shoal::net::http {

/// Adds `GET path` to `s`: each request gathers the metrics of every shard
/// (`metrics::collect_all_shards`) and answers them in the Prometheus text exposition format.
void add_prometheus_route(server& s, std::string path = "/metrics");

} // namespace shoal::net::http
