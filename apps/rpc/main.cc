// shoal-rpc-bench: seed 001's RPC benchmark (echo of 128 B to 8 MB at concurrency 1 to 256).
//
//   shoal-rpc-bench server [--host 0.0.0.0] [--port 9000] [--transport tcp|rdma]
//   shoal-rpc-bench bench  [--host 127.0.0.1] [--port 9000] [--sizes ...] [--concurrency ...]
//                          [--duration 1] [--warmup 0.2] [--json] [--svg FILE]
//   shoal-rpc-bench local  (server and benchmark in one process; same options)
//
// Over RDMA (--transport rdma) --host must be the RDMA device's address (rdma_cm refuses
// loopback); --rdma-path messages (default: one SEND per call, large bodies by READ) or stream
// (the RDMA stream, as over TCP) must be the same on server and bench.

#include "apps/common/metrics.hh"
#include "apps/common/options.hh"
#include "apps/rpc/rpc_bench.hh"
#include "core/app.hh"
#include "core/coroutine.hh"
#include "core/sharded.hh"
#include "net/rdma/options.hh"
#include "net/transport.hh"
#include "rpc/metrics.hh"
#include "rpc/server.hh"

#include <cstdio>
#include <fstream>
#include <malloc.h>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/core.h>

using namespace shoal;
using shoal::apps::seconds_of;
using shoal::apps::split;

namespace {

/// Starts a server on every shard listening on `addr`; returns the address (port picked).
future<net::socket_address> start_servers(sharded<rpc::server>& servers, net::transport t,
                                          net::socket_address addr, size_t max_frame,
                                          const rpc_bench::options& o) {
    rpc::server_options so;
    so.max_frame_size = max_frame;
    so.rdma_messages = o.rdma_messages;
    so.rdma = o.rdma;
    co_await servers.start(t, so);
    co_await servers.invoke_on(0, [&addr](rpc::server& s) {
        rpc_bench::register_verbs(s);
        s.listen(addr);
        addr = s.local_address();
    });
    co_await servers.invoke_on_all([addr](rpc::server& s) {
        if (this_shard_id() != 0) {
            rpc_bench::register_verbs(s);
            s.listen(addr);
        }
    });
    co_return addr;
}

/// Starts the transport, runs `body(servers)` and then, whatever happened, stops the servers
/// and the transport; returns what `body` returned or rethrows what it threw.
template <typename Body>
future<int> with_transport(net::transport t, Body body) {
    co_await t.start();
    sharded<rpc::server> servers;
    std::exception_ptr failed;
    int rc = 0;
    try {
        rc = co_await body(servers);
    } catch (...) {
        failed = std::current_exception();
    }
    co_await servers.stop();
    co_await t.stop();
    if (failed) {
        std::rethrow_exception(failed);
    }
    co_return rc;
}

future<int> run_server(net::transport t, net::socket_address addr, size_t max_frame, rpc_bench::options o) {
    return with_transport(t, [t, addr, max_frame, o](sharded<rpc::server>& servers) -> future<int> {
        auto where = co_await start_servers(servers, t, addr, max_frame, o);
        apps::shard_metric_groups published;
        co_await published.publish([&servers] { return rpc::publish_metrics(servers.local()); });
        fmt::print("shoal-rpc-bench: {} server on {} ({} shards); Ctrl-C stops\n", t.name, where.to_string(),
                   shard_count());
        std::fflush(stdout);
        co_await stop_requested();
        co_await published.clear();
        co_return 0;
    });
}

future<int> run_bench(net::transport t, rpc_bench::options o, bool local, bool json, std::string svg) {
    std::vector<echo::cell_result> cells;
    co_await with_transport(t, [&](sharded<rpc::server>& servers) -> future<int> {
        if (local) {
            size_t largest = 0;
            for (size_t s : o.sizes) {
                largest = std::max(largest, s);
            }
            o.server =
                co_await start_servers(servers, t, o.server, std::max<size_t>(largest + 4096, 64 << 20), o);
        }
        apps::shard_metric_groups client_metrics; // calls and their latency, with --prometheus-port
        co_await client_metrics.publish([] { return rpc::publish_client_metrics(); });
        cells = co_await rpc_bench::run(t, o);
        co_await client_metrics.clear();
        co_return 0;
    });
    std::string title = fmt::format("shoal RPC echo over {} ({} payload, {} shards)", t.name,
                                    o.string_payload ? "string" : "attachment", shard_count());
    if (json) {
        fmt::print("{}", echo::format_json(cells, t.name));
    } else {
        fmt::print("\n{}:\n\n{}", title, echo::format_table(cells, o.label));
    }
    if (!svg.empty()) {
        std::ofstream f(svg);
        f << rpc_bench::chart(cells, title);
        if (!f) {
            throw std::runtime_error("cannot write " + svg);
        }
    }
    uint64_t errors = 0;
    for (const auto& c : cells) {
        errors += c.errors;
    }
    co_return errors ? 1 : 0;
}

} // namespace

int main(int argc, char** argv) {
    // Frames of 128 KB and more are malloc'ed per call. By default glibc maps each one freshly
    // (mmap threshold 128 KB) or gives freed heap back to the kernel (trim), and the page faults
    // of a fresh buffer cost more than the call: 256 KB echoes ran 30x slower on this VM. Keep
    // that memory in the process instead.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    app a("shoal-rpc-bench",
          "RPC echo server (`server`), its benchmark (`bench`), or both in one process (`local`)");
    a.add_option("transport", "tcp or rdma", "tcp");
    a.add_option("host", "server: address to listen on; bench: server to measure", "");
    a.add_option("port", "port", "9000");
    a.add_option("sizes", "payload sizes", "128,4K,32K,256K,1M,8M");
    a.add_option("concurrency", "calls in flight (one per caller)", "1,4,16,64,256");
    a.add_option("duration", "measured seconds per cell", "1");
    a.add_option("warmup", "unmeasured seconds before each cell", "0.2");
    a.add_option("connections-per-shard", "connections each client shard opens (callers share them)", "4");
    a.add_option("payload", "attachment (sent uncopied) or string (serialized)", "attachment");
    a.add_option("rdma-path", "over RDMA: messages (one SEND per call, large bodies by READ) or stream",
                 "messages");
    a.add_option("rdma-read-threshold", "over RDMA messages: bodies of larger frames travel by READ", "64K");
    a.add_option("rdma-registration-cache",
                 "over RDMA messages: registered bytes each connection keeps for large bodies (0: none)",
                 "32M");
    a.add_option("rdma-read-chunk", "over RDMA messages: a large body is READ in pieces of this size", "1M");
    a.add_option("rdma-reads-in-flight", "over RDMA messages: READ requests a connection posts at once", "1");
    a.add_option("rdma-coalesce",
                 "over RDMA messages: small frames ready together share one message (on|off)", "on");
    a.add_option("svg", "write a chart (QPS and P99 against concurrency) to this file");
    a.add_flag("json", "print JSON instead of the table");
    net::add_transport_options(a);
    apps::add_metrics_options(a);
    if (auto rc = a.parse(argc, argv)) {
        return *rc;
    }
    const auto& pos = a.positional();
    std::string mode = pos.empty() ? "" : pos[0];
    if (mode != "server" && mode != "bench" && mode != "local") {
        std::fprintf(stderr, "usage: shoal-rpc-bench server|bench|local [options] (see --help)\n");
        return 2;
    }
    net::transport t;
    smp_options smp = a.engine_options();
    rpc_bench::options o;
    try {
        t = net::make_transport(a.get("transport"), a);
        if (t.name == "rdma") {
            net::rdma::apply_nic_local_option(a, smp);
        }
        std::string host = a.get("host");
        if (host.empty()) {
            if (t.name == "rdma") {
                throw std::invalid_argument("--transport rdma needs --host, the RDMA device's address");
            }
            host = mode == "server" ? "0.0.0.0" : "127.0.0.1";
        }
        uint64_t port = a.get_size("port");
        if (port > 65535) {
            throw std::invalid_argument("--port " + a.get("port") + ": a port is 0..65535");
        }
        o.server = net::socket_address::from_host_port(host, uint16_t(mode == "local" ? 0 : port));
        for (const auto& s : split(a.get("sizes"))) {
            o.sizes.push_back(size_t(parse_size(s)));
        }
        for (const auto& c : split(a.get("concurrency"))) {
            o.concurrency.push_back(unsigned(parse_size(c)));
        }
        o.duration = seconds_of(a, "duration");
        o.warmup = seconds_of(a, "warmup");
        o.connections_per_shard = unsigned(a.get_size("connections-per-shard"));
        if (a.get("payload") != "attachment" && a.get("payload") != "string") {
            throw std::invalid_argument("--payload is attachment or string");
        }
        o.string_payload = a.get("payload") == "string";
        if (a.get("rdma-path") != "messages" && a.get("rdma-path") != "stream") {
            throw std::invalid_argument("--rdma-path is messages or stream");
        }
        o.rdma_messages = a.get("rdma-path") == "messages";
        o.rdma.read_threshold = size_t(parse_size(a.get("rdma-read-threshold")));
        o.rdma.registration_cache = size_t(parse_size(a.get("rdma-registration-cache")));
        o.rdma.read_chunk = size_t(parse_size(a.get("rdma-read-chunk")));
        o.rdma.max_reads = std::max(1u, unsigned(a.get_size("rdma-reads-in-flight")));
        if (a.get("rdma-coalesce") != "on" && a.get("rdma-coalesce") != "off") {
            throw std::invalid_argument("--rdma-coalesce is on or off");
        }
        o.rdma.coalesce = a.get("rdma-coalesce") == "on";
        o.label = "rpc-" + t.name;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shoal-rpc-bench: %s\n", e.what());
        return 2;
    }
    try {
        return run_shards(smp, [&]() -> future<int> {
            return apps::with_metrics(a, [&]() -> future<int> {
                if (mode == "server") {
                    return run_server(t, o.server, size_t(64) << 20, o);
                }
                return run_bench(t, o, mode == "local", a.has("json"), a.has("svg") ? a.get("svg") : "");
            });
        });
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shoal-rpc-bench: %s\n", e.what());
        return 1;
    }
}
