// shoal-kv-bench: a load generator speaking memcached's text protocol.
//
//   shoal-kv-bench [--host 127.0.0.1] [--port 11211] [--keys 10000] [--key-dist uniform | zipf:0.9]
//                  [--value-size 32 | 32-1024 | 100:0.5,1000:0.3,10000:0.2]
//                  [--mode mixed | cache] [--requests 100000] [--warmup-max 4] [--seed 1] [--no-probe]
//                  [--get-ratio 0.9] [--multiget 1] [--connections 16] [--pipeline 1]
//                  [--duration 2] [--warmup 0.3] [--json] [--svg FILE]
//                  [--targets shoal=127.0.0.1:11211@PID,memcached=127.0.0.1:11311@PID] [--repeat 3]
//                  [--transport tcp|rdma] [--no-location-cache] [--inline-put-max N]
//                  [--inline-get-max N] [--time-gets] [--zero-copy]
// With --transport rdma the port is shoal-kv's --rdma-port and the host its RDMA address.
// --mode cache is a look-aside cache client (get; on a miss, set): it reports the hit ratio,
// evictions (the server's `stats`) and the server's RSS (with --pid or name=host:port@PID).

#include "apps/common/metrics.hh"
#include "apps/common/svg_chart.hh"
#include "apps/kv/bench.hh"
#include "core/app.hh"
#include "core/coroutine.hh"
#include "core/log.hh"
#include "net/rdma/rdma.hh"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include <fmt/core.h>

using namespace shoal;
using namespace shoal::kv_app;

namespace {

double number_of(const app& a, const std::string& name, double lo, double hi) {
    const std::string text = a.get(name);
    size_t used = 0;
    double v = lo - 1;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception&) {
    }
    if (used != text.size() || v < lo || v > hi) {
        throw std::invalid_argument(
            fmt::format("--{} '{}': expected a number in [{}, {}]", name, text, lo, hi));
    }
    return v;
}

kv_bench_options options_from(const app& a) {
    kv_bench_options o;
    if (a.get("transport") == "rdma") {
        o.transport = kv_transport::rdma;
    } else if (a.get("transport") != "tcp") {
        throw std::invalid_argument("--transport '" + a.get("transport") + "': tcp or rdma");
    }
    o.location_cache = !a.has("no-location-cache");
    if (!a.get("inline-put-max").empty()) {
        o.inline_put_max = size_t(a.get_size("inline-put-max"));
    }
    if (!a.get("inline-get-max").empty()) {
        o.inline_get_max = uint32_t(std::min<uint64_t>(a.get_size("inline-get-max"), UINT32_MAX));
    }
    o.time_gets = a.has("time-gets");
    o.zero_copy = a.has("zero-copy");
    const uint64_t keys = a.get_size("keys");
    if (keys == 0 || keys > UINT32_MAX) {
        throw std::invalid_argument(fmt::format("--keys {}: expected 1..{}", keys, UINT32_MAX));
    }
    o.keys = key_distribution::parse(a.get("key-dist"), keys);
    o.values = size_distribution::parse(a.get("value-size"));
    if (o.values.max() > (1 << 20) - 512) {
        throw std::invalid_argument("--value-size: values up to 1M-512 bytes");
    }
    o.get_ratio = number_of(a, "get-ratio", 0, 1);
    o.multiget = unsigned(a.get_size("multiget"));
    o.connections = unsigned(a.get_size("connections"));
    o.pipeline = unsigned(a.get_size("pipeline"));
    o.duration = std::chrono::duration<double>(number_of(a, "duration", 0.01, 3600));
    o.warmup = std::chrono::duration<double>(number_of(a, "warmup", 0, 3600));
    o.repeat = unsigned(a.get_size("repeat"));
    o.preload = !a.has("no-preload");
    if (o.multiget == 0 || o.connections == 0 || o.pipeline == 0) {
        throw std::invalid_argument("--multiget, --connections and --pipeline must be at least 1");
    }
    if (a.get("mode") == "cache") {
        o.mode = kv_mode::cache;
        if (o.transport != kv_transport::tcp || o.multiget != 1 || o.repeat > 1) {
            throw std::invalid_argument("--mode cache needs --transport tcp, --multiget 1 and --repeat 1");
        }
    } else if (a.get("mode") != "mixed") {
        throw std::invalid_argument("--mode '" + a.get("mode") + "': mixed or cache");
    }
    o.requests = a.get_size("requests");
    o.seed = a.get_size("seed");
    o.warmup_max = number_of(a, "warmup-max", 0, 1000);
    o.probe = !a.has("no-probe");
    if (o.requests == 0) {
        throw std::invalid_argument("--requests must be at least 1");
    }
    if (o.zero_copy && (o.transport != kv_transport::rdma || o.multiget != 1)) {
        throw std::invalid_argument("--zero-copy needs --transport rdma and --multiget 1");
    }
    if (a.has("targets")) {
        o.targets = apps::parse_targets(a.get("targets"));
    } else {
        uint64_t port = a.get_size("port");
        if (port == 0 || port > 65535) {
            throw std::invalid_argument("--port: 1..65535");
        }
        o.targets.push_back({"server", net::socket_address::from_host_port(a.get("host"), uint16_t(port)),
                             a.has("pid") ? std::stoi(a.get("pid")) : 0});
    }
    return o;
}

std::string chart_of(const std::vector<kv_result>& rs) {
    std::vector<apps::bar_group> qps, lat;
    for (const auto& r : rs) {
        qps.push_back({r.target, {r.qps() / 1000.0}});
        lat.push_back({r.target,
                       {double(r.get_ns.percentile(50)) / 1000, double(r.get_ns.percentile(99)) / 1000,
                        double(r.set_ns.percentile(50)) / 1000, double(r.set_ns.percentile(99)) / 1000}});
    }
    std::string a = apps::svg_bar_chart("throughput", "kQPS", {"all ops"}, qps);
    std::string b = apps::svg_bar_chart("latency", "µs", {"get P50", "get P99", "set P50", "set P99"}, lat);
    // Two charts stacked in one document.
    auto body = [](const std::string& svg) {
        auto open = svg.find('>');
        auto close = svg.rfind("</svg>");
        return svg.substr(open + 1, close - open - 1);
    };
    return fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"640\">\n<g>{}</g>\n"
                       "<g transform=\"translate(0 320)\">{}</g>\n</svg>\n",
                       body(a), body(b));
}

} // namespace

int main(int argc, char** argv) {
    app a("shoal-kv-bench", "load generator for memcached-protocol servers (shoal-kv, memcached)");
    a.add_option("host", "server address", "127.0.0.1");
    a.add_option("port", "server port", "11211");
    a.add_option("pid", "the server's process id: report its CPU per operation (cache: its RSS)");
    a.add_option("targets", "several servers, name=host:port[@pid],...; measured one after the other");
    a.add_option("keys", "key space: key:00000000 ... (N keys)", "10000");
    a.add_option("key-dist", "key popularity: uniform or zipf:S (S in (0, 10], e.g. zipf:0.9)", "uniform");
    a.add_option("value-size",
                 "value bytes: N, MIN-MAX (uniform) or SIZE:WEIGHT,... (e.g. 100:0.5,1000:0.3,10000:0.2)",
                 "32");
    a.add_option("mode",
                 "mixed (gets and sets by --get-ratio, keys preloaded) or cache (get; set on a miss; hits "
                 "checked byte for byte; reports hit ratio, evictions, RSS)",
                 "mixed");
    a.add_option("requests", "cache: measured gets (over all connections), after the warm-up", "100000");
    a.add_option("warmup-max",
                 "cache: warm up until a whole round of gets ran on an evicting cache, at most this many "
                 "times --keys gets",
                 "4");
    a.add_option("seed", "cache: keys, value sizes and value bytes follow from it", "1");
    a.add_flag("no-probe", "cache: do not ask for every key's size after the run (live items and bytes)");
    a.add_option("get-ratio", "share of gets (0..1)", "0.9");
    a.add_option("multiget", "keys per get", "1");
    a.add_option("connections", "connections (spread over the client's shards)", "16");
    a.add_option("pipeline", "requests each connection writes before reading the replies", "1");
    a.add_option("duration", "measured seconds", "2");
    a.add_option("warmup", "unmeasured seconds first", "0.3");
    a.add_option("repeat", "runs per target, interleaved; the median-QPS run is reported", "1");
    a.add_option("svg", "also write a chart to this file");
    a.add_flag("json", "print JSON instead of the table");
    a.add_flag("no-preload", "do not set every key before measuring");
    a.add_option("transport", "tcp (memcached text protocol) or rdma (shoal-kv's --rdma-port)", "tcp");
    a.add_flag("no-location-cache", "rdma: every GET asks the server (no direct READ of a cached location)");
    a.add_option("inline-put-max",
                 "rdma: PUT values up to N bytes inline, larger ones granted (default 65536)", "");
    a.add_option("inline-get-max",
                 "rdma: GET replies carry values up to N bytes inline (default: the server's)", "");
    a.add_flag("zero-copy", "rdma: PUT from and GET into registered buffers (no copy of large values)");
    a.add_flag("time-gets", "rdma: split the latency of GETs by a cached location (READ vs the rest)");
    apps::add_metrics_options(a);
    if (auto rc = a.parse(argc, argv)) {
        return *rc;
    }
    kv_bench_options o;
    try {
        o = options_from(a);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shoal-kv-bench: %s\n", e.what());
        return 2;
    }
    try {
        return run_shards(a.engine_options(), [&]() -> future<int> {
            return apps::with_metrics(a, [&]() -> future<int> {
                if (o.transport == kv_transport::rdma) {
                    co_await net::rdma::start();
                }
                std::exception_ptr failed;
                std::vector<kv_result> results;
                try {
                    results = co_await run_kv_bench(o);
                } catch (...) {
                    failed = std::current_exception();
                }
                if (o.transport == kv_transport::rdma) {
                    co_await net::rdma::stop();
                }
                if (failed) {
                    std::rethrow_exception(failed);
                }
                if (a.has("json")) {
                    fmt::print("{}", format_kv_json(results, o));
                } else {
                    fmt::print("{}", format_kv_table(results, o));
                }
                if (a.has("svg")) {
                    std::ofstream(a.get("svg")) << chart_of(results);
                }
                uint64_t errors = 0;
                for (const auto& r : results) {
                    errors += r.errors + r.cache.wrong_values;
                    if (r.cache.wrong_values) {
                        std::fprintf(stderr, "shoal-kv-bench: %s: %llu hits with a wrong value\n",
                                     r.target.c_str(), static_cast<unsigned long long>(r.cache.wrong_values));
                    }
                }
                co_return errors ? 1 : 0;
            });
        });
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shoal-kv-bench: %s\n", e.what());
        return 1;
    }
}
