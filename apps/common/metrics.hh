#pragma once

#include "core/app.hh"
#include "core/future.hh"

#include <functional>

namespace shoal::apps {

/// Declares `--prometheus-port N` (off unless given; 0 picks a free port) and
/// `--prometheus-address` (default 0.0.0.0).
void add_metrics_options(app& a);

/// Runs `main` with metrics: the reactor, io_uring, TCP and RDMA metrics are published on every
/// shard and, when `--prometheus-port` was given, served on shard 0 at
/// `http://ADDRESS:PORT/metrics` (the address is printed on stdout) until `main` resolves.
/// A bad port or an address that cannot be bound ends the program with status 2 and a message.
future<int> with_metrics(const app& a, std::function<future<int>()> main);

} // namespace shoal::apps
