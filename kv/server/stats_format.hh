#pragma once

#include "kv/store/stats.hh"
#include "kv/store/store.hh"

#include <cstdint>
#include <string>
#include <vector>

namespace shoal::kv {

/// A server's connection counters (per shard, summed for `stats`).
struct connection_stats {
    uint64_t curr_connections = 0;
    uint64_t total_connections = 0;
    uint64_t rejected_connections = 0;
    uint64_t bytes_read = 0;
    uint64_t bytes_written = 0;
    uint64_t idle_kicks = 0;    ///< connections closed by the idle timeout (memcached's name)
    uint64_t landing_bytes = 0; ///< store bytes reserved for values still arriving (a gauge)

    /// Adds `o`'s counters.
    connection_stats& operator+=(const connection_stats& o) noexcept {
        curr_connections += o.curr_connections;
        total_connections += o.total_connections;
        rejected_connections += o.rejected_connections;
        bytes_read += o.bytes_read;
        bytes_written += o.bytes_written;
        idle_kicks += o.idle_kicks;
        landing_bytes += o.landing_bytes;
        return *this;
    }
};

/// What `stats` reports besides the counters.
struct server_info {
    uint32_t pid = 0;
    uint32_t uptime = 0;
    uint32_t now = 0;
    unsigned threads = 1;
    unsigned max_connections = 1024;
    uint64_t limit_maxbytes = 0;
    uint64_t item_size_max = 0;
    uint16_t port = 0;
    double growth_factor = 1.25;
    size_t chunk_size = 48;
};

/// The version string the server reports: the memcached protocol level it answers as.
constexpr const char* protocol_version = "1.6.18";

/// Appends `stats` (memcached's general statistics, END included).
void format_general_stats(const store_stats& s, const connection_stats& c, const server_info& info,
                          std::string& out);
/// Appends `stats settings`.
void format_settings(const server_info& info, std::string& out);
/// Appends `stats slabs` from the classes of every shard (same class ids on all shards).
void format_slabs(const std::vector<slab_class_info>& classes, uint64_t total_malloced, std::string& out);
/// Appends `stats items`.
void format_items(const std::vector<slab_class_info>& classes, uint32_t now, std::string& out);
/// Sums per-shard class lists by class id.
std::vector<slab_class_info> merge_classes(const std::vector<std::vector<slab_class_info>>& per_shard);

} // namespace shoal::kv
