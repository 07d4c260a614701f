#include "rpc/metrics.hh"

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
    return g;
}

} // namespace shoal::rpc
