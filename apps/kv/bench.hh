#pragma once

#include "apps/common/bench_target.hh"
#include "apps/echo/histogram.hh"
#include "apps/kv/bench_dist.hh"
#include "core/future.hh"
#include "net/socket_address.hh"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace shoal::kv_app {

/// A server `shoal-kv-bench` loads (name, address, pid).
using apps::bench_target;

/// How `shoal-kv-bench` talks to its targets.
enum class kv_transport {
    tcp,  ///< memcached's text protocol (any memcached server)
    rdma, ///< shoal-kv's native RDMA protocol (kv::client's RDMA backend; target = --rdma-port)
};

/// What `shoal-kv-bench` does on each connection.
enum class kv_mode {
    mixed, ///< gets and sets by `get_ratio`, keys preloaded (a throughput and latency load)
    cache, ///< a look-aside cache client: get; on a miss, set the key's value (a hit-ratio load)
};

/// One load: the same for every target.
struct kv_bench_options {
    kv_transport transport = kv_transport::tcp;
    bool location_cache = true;             ///< rdma: GETs of a known key READ its cached location
    std::optional<size_t> inline_put_max;   ///< rdma: the client's inline PUT limit (unset: default)
    std::optional<uint32_t> inline_get_max; ///< rdma: the client's inline GET limit (unset: the server's)
    bool zero_copy = false; ///< rdma: PUT from / GET into registered buffers (`store_from`, `get_into`)
    bool time_gets = false; ///< rdma: split the latency of GETs by a cached location (`cached_get_split`)
    std::vector<bench_target> targets;
    kv_mode mode = kv_mode::mixed;
    key_distribution keys;      ///< key space key:00000000 ... and which keys are asked for
    size_distribution values;   ///< value sizes
    uint64_t seed = 1;          ///< cache: keys asked, value sizes and bytes all follow from it
    uint64_t requests = 100000; ///< cache: measured gets, over all connections
    double warmup_max = 4;      ///< cache: warm-up gets at most this many times the key space
    bool probe = true;          ///< cache: after the run, ask for every key's size (live bytes)
    double get_ratio = 0.9;     ///< share of operations that are gets
    unsigned multiget = 1;      ///< keys per get
    unsigned connections = 16;  ///< over all client shards
    unsigned pipeline = 1;      ///< requests written before the replies are read
    std::chrono::duration<double> duration{2.0};
    std::chrono::duration<double> warmup{0.3};
    bool preload = true; ///< set every key once before measuring
    unsigned repeat = 1; ///< runs per target, interleaved (A B A B)
};

/// Where the time of GETs by a cached location went (rdma, `--time-gets`; single-key GETs).
struct cached_get_split {
    uint64_t gets = 0;
    uint64_t before_ns = 0;      ///< sums: `get_one` entered → READ issued
    uint64_t after_ns = 0;       ///< READ resumed → value ready in `get_one`
    echo::histogram read_ns;     ///< READ issued → its completion resumed the GET (network + rxe)
    echo::histogram software_ns; ///< the rest of each GET's latency as the bench measured it
};

/// What a server said about itself (`stats`) and its resident memory (/proc/PID/status; -1
/// without a pid or when unreadable).
struct server_snapshot {
    int64_t evictions = -1, curr_items = -1, bytes = -1, total_items = -1, limit_maxbytes = -1;
    int64_t rss_bytes = -1;
};

/// What a cache-client run (`kv_mode::cache`) measured beyond the counts of `kv_result`.
struct cache_result {
    uint64_t warmup_gets = 0;  ///< gets before the measured ones
    uint64_t set_failures = 0; ///< sets after a miss the server refused (e.g. out of memory)
    uint64_t wrong_values = 0; ///< hits whose bytes were not the key's value
    server_snapshot start;     ///< before the warm-up (an empty server: its idle RSS)
    server_snapshot measured;  ///< after the warm-up, before the measured gets
    server_snapshot end;       ///< after them
    int64_t live_items = -1;   ///< keys found by the probe after the run (-1: no probe)
    int64_t live_bytes = -1;   ///< the sum of their key and value lengths

    /// Evictions during the measured gets (-1 when the server does not say).
    int64_t measured_evictions() const noexcept {
        return end.evictions < 0 || measured.evictions < 0 ? -1 : end.evictions - measured.evictions;
    }
    /// Bytes the server's RSS holds per live item beyond the items' keys and values:
    /// (RSS after the run - live key and value bytes) / live items; -1 when not measured.
    double overhead_per_item() const noexcept { return overhead_above(0); }
    /// The same above the empty server's RSS: (RSS after the run - RSS before the warm-up - live
    /// key and value bytes) / live items; -1 when not measured.
    double overhead_above_idle() const noexcept {
        return start.rss_bytes < 0 ? -1 : overhead_above(start.rss_bytes);
    }

private:
    double overhead_above(int64_t base) const noexcept {
        return end.rss_bytes < 0 || live_items <= 0
                   ? -1
                   : double(end.rss_bytes - base - live_bytes) / double(live_items);
    }
};

/// What one run against one target measured.
struct kv_result {
    std::string target;
    double seconds = 0;
    uint64_t gets = 0, sets = 0, hits = 0, keys_asked = 0, errors = 0;
    uint64_t direct_reads = 0, control_gets = 0;     ///< rdma: GETs by cached location / by request
    uint64_t inline_puts = 0, granted_puts = 0;      ///< rdma: PUTs with the value inline / granted
    uint64_t zero_copy_puts = 0, zero_copy_gets = 0; ///< rdma: of which from / into registered buffers
    cached_get_split split;                          ///< rdma with `time_gets`
    cache_result cache;                              ///< kv_mode::cache
    double server_cpu_seconds = -1;
    echo::histogram get_ns;
    echo::histogram set_ns;

    /// Hits per key asked for (0 when none was).
    double hit_ratio() const noexcept { return keys_asked ? double(hits) / double(keys_asked) : 0; }
    /// Operations per second (gets and sets).
    double qps() const noexcept { return seconds > 0 ? double(gets + sets) / seconds : 0; }
    /// Server CPU microseconds per operation (-1 when not measured).
    double cpu_us_per_op() const noexcept {
        return server_cpu_seconds < 0 || gets + sets == 0 ? -1
                                                          : server_cpu_seconds * 1e6 / double(gets + sets);
    }
};

/// Runs the load against every target (from shard 0; connections spread over all shards) and
/// returns one result per target (the median-QPS run when repeated). A cache-client run warms
/// each target up (rounds of gets, until a whole round ran with the server evicting, or
/// `warmup_max` times the key space), then measures `requests` gets.
future<std::vector<kv_result>> run_kv_bench(kv_bench_options opts);

/// A table: per target and operation, count, QPS, P50/P90/P99/P99.9 (µs), hit ratio, CPU.
std::string format_kv_table(const std::vector<kv_result>& results, const kv_bench_options& o);
/// The same as JSON.
std::string format_kv_json(const std::vector<kv_result>& results, const kv_bench_options& o);

} // namespace shoal::kv_app
