#include "rpc/metrics.hh"

#include "rpc/client_stats.hh"
#include "rpc/server.hh"

namespace shoal::rpc {

metrics::metric_group publish_metrics(const server& s) {
    metrics::metric_group g;
    auto field = [&s](uint64_t server_stats::*member) {
        return [&s, member]() -> std::optional<double> { return double(s.stats().*member); };
    };
    g.add_counter("shoal_rpc_server_connections_total", "Connections the RPC server accepted.",
                  field(&server_stats::connections_accepted));
    g.add_gauge("shoal_rpc_server_connections", "RPC connections open now.",
                field(&server_stats::connections_open));
    g.add_counter("shoal_rpc_server_aborted_connections_total",
                  "Connections stop() aborted after its timeout.", field(&server_stats::connections_aborted));
    g.add_counter("shoal_rpc_server_calls_total", "Requests and one-way calls dispatched.",
                  field(&server_stats::calls));
    g.add_gauge("shoal_rpc_server_calls_in_flight", "Handlers running now.",
                field(&server_stats::calls_in_flight));
    g.add_counter("shoal_rpc_server_error_replies_total",
                  "Error replies (handler threw, unknown verb, bad signature).",
                  field(&server_stats::errors_returned));
    g.add_counter("shoal_rpc_server_protocol_errors_total", "Connections closed for malformed frames.",
                  field(&server_stats::protocol_errors));
    g.add_gauge("shoal_rpc_server_max_queued_reply_bytes", "Most reply bytes ever queued for one connection.",
                field(&server_stats::max_queued_reply_bytes));
    g.add_histogram("shoal_rpc_server_handler_seconds",
                    "Time a handler took, from dispatch to its value or error.", s.handler_latency());
    return g;
}

client_stats& local_client_stats() noexcept {
    static thread_local client_stats stats; // one per shard thread
    return stats;
}

metrics::metric_group publish_client_metrics() {
    metrics::metric_group g;
    auto field = [](uint64_t client_stats::*member) {
        return [member]() -> std::optional<double> { return double(local_client_stats().*member); };
    };
    g.add_counter("shoal_rpc_client_calls_total", "Calls this shard's clients sent that wait for a reply.",
                  field(&client_stats::calls));
    g.add_counter("shoal_rpc_client_one_way_total", "One-way calls this shard's clients sent.",
                  field(&client_stats::one_way));
    g.add_counter("shoal_rpc_client_replies_total", "Replies received in time (values and error replies).",
                  field(&client_stats::replies));
    g.add_counter("shoal_rpc_client_errors_total",
                  "Calls that failed: error reply, timeout or connection lost.",
                  field(&client_stats::errors));
    g.add_counter("shoal_rpc_client_timeouts_total", "Calls that timed out waiting for their reply.",
                  field(&client_stats::timeouts));
    g.add_gauge("shoal_rpc_client_calls_in_flight", "Calls waiting for their reply now.",
                field(&client_stats::in_flight));
    g.add_counter("shoal_rpc_client_sent_bytes_total", "Frame bytes of the calls sent (headers included).",
                  field(&client_stats::sent_bytes));
    g.add_histogram("shoal_rpc_client_call_seconds",
                    "Time from sending a call to its reply (value or error).", local_client_stats().latency);
    return g;
}

} // namespace shoal::rpc
