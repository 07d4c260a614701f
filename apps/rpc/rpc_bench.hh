#pragma once

#include "apps/echo/bench.hh"
#include "core/future.hh"
#include "net/socket_address.hh"
#include "net/transport.hh"
#include "rpc/server.hh"

#include <chrono>
#include <string>
#include <vector>

namespace shoal::rpc_bench {

/// The benchmark's verbs: a true echo of the payload, sent as an attachment (no copy) or as a
/// string (serialized; the reply view points into the request).
rpc::attachment echo(rpc::attachment payload);
std::string_view echo_string(std::string_view payload);

/// Registers the benchmark's verbs on `s`.
void register_verbs(rpc::server& s);

/// What one run measures: seed 001's grid, or the subset given.
struct options {
    net::socket_address server;
    std::vector<size_t> sizes;
    std::vector<unsigned> concurrency;
    std::chrono::duration<double> duration{1.0}; ///< measured seconds per cell
    std::chrono::duration<double> warmup{0.2};   ///< unmeasured seconds before
    unsigned connections_per_shard = 4;          ///< callers of a shard share this many connections
    bool string_payload = false;                 ///< echo_string instead of echo (attachment)
    bool rdma_messages = true;                   ///< over RDMA: the message path (false: the stream)
    rpc::rdma_link_options rdma; ///< the RDMA message path's links (READ threshold, cache, ...)
    std::string label = "rpc";
};

/// Runs every cell from shard 0: the callers of a cell are spread over all shards, each caller
/// with one call in flight (closed loop); latency is per call, from call to reply.
future<std::vector<echo::cell_result>> run(net::transport t, options o);

/// The SVG chart of `cells`: QPS and P99 latency against concurrency, one line per size.
std::string chart(const std::vector<echo::cell_result>& cells, const std::string& title);

} // namespace shoal::rpc_bench
