#include "kv/server/metrics.hh"

#include "kv/server/server.hh"

#include <string>
#include <string_view>

namespace shoal::kv {

namespace {

/// The store's figures that are levels rather than counts, with their metric names.
struct gauge_name {
    std::string_view field;
    const char* name;
    const char* help;
};
constexpr gauge_name store_gauges[] = {
    {"bytes", "shoal_kv_item_bytes", "Bytes the items stored take."},
    {"curr_items", "shoal_kv_items", "Items stored now."},
    {"total_malloced", "shoal_kv_malloced_bytes", "Memory taken for item pages."},
    {"hash_bytes", "shoal_kv_hash_bytes", "Memory of the hash table."},
};

} // namespace

metrics::metric_group publish_metrics(server& s) {
    metrics::metric_group g;
    auto store_field = [&g, &s](std::string_view field, uint64_t store_stats::*member) {
        metrics::reader read = [&s, member]() -> std::optional<double> {
            return double(s.store().stats().*member);
        };
        for (const auto& gauge : store_gauges) {
            if (gauge.field == field) {
                g.add_gauge(gauge.name, gauge.help, std::move(read));
                return;
            }
        }
        g.add_counter("shoal_kv_" + std::string(field) + "_total",
                      "memcached's " + std::string(field) + " (see `stats`), this shard's store.",
                      std::move(read));
    };
#define SHOAL_KV_PUBLISH(name) store_field(#name, &store_stats::name);
    SHOAL_KV_STORE_STATS(SHOAL_KV_PUBLISH)
#undef SHOAL_KV_PUBLISH
    auto conn = [&s](uint64_t connection_stats::*member) {
        return [&s, member]() -> std::optional<double> { return double(s.conn_stats().*member); };
    };
    g.add_gauge("shoal_kv_connections", "Client connections open now.",
                conn(&connection_stats::curr_connections));
    g.add_counter("shoal_kv_connections_total", "Client connections accepted.",
                  conn(&connection_stats::total_connections));
    g.add_counter("shoal_kv_rejected_connections_total",
                  "Connections refused: over -c, or when no descriptor was left.",
                  conn(&connection_stats::rejected_connections));
    g.add_counter("shoal_kv_read_bytes_total", "Request bytes read from clients.",
                  conn(&connection_stats::bytes_read));
    g.add_counter("shoal_kv_written_bytes_total", "Reply bytes written to clients.",
                  conn(&connection_stats::bytes_written));
    g.add_histogram(
        "shoal_kv_request_seconds",
        "Server time from the read that brought requests to their replies flushed (one sample per read).",
        s.request_latency());
    return g;
}

} // namespace shoal::kv
