// shoal-echo: an echo server on every shard, and the client that benchmarks it.
//
//   shoal-echo server [--host 0.0.0.0] [--port 7000] [--smp N] [--transport tcp|rdma]
//   shoal-echo bench  [--host 127.0.0.1] [--port 7000] [--sizes 128,4K,32K,256K,1M]
//                     [--concurrency 1,4,16,64] [--duration 0.5] [--json] [--verify] [--transport tcp|rdma]
//                     [--targets shoal=127.0.0.1:7000,epoll=127.0.0.1:7001]
//
// Over RDMA (--transport rdma) the addresses are the RDMA device's IP addresses (rdma_cm does
// not accept loopback); the --rdma-* options choose the device and size its resources.

#include "apps/common/metrics.hh"
#include "apps/common/options.hh"
#include "apps/echo/bench.hh"
#include "apps/echo/echo_server.hh"
#include "core/app.hh"
#include "core/coroutine.hh"
#include "core/log.hh"
#include "core/sharded.hh"
#include "net/rdma/options.hh"
#include "net/tcp/tcp.hh"
#include "net/transport.hh"

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/core.h>

using namespace shoal;
using namespace shoal::echo;
using shoal::apps::port_of;
using shoal::apps::seconds_of;
using shoal::apps::split;

namespace {

future<int> run_server(net::transport t, net::socket_address addr,
                       std::chrono::milliseconds shutdown_timeout) {
    co_await t.start();
    sharded<echo_server> servers;
    co_await servers.start(t, steady_clock_type::duration(shutdown_timeout));
    std::exception_ptr failed;
    try {
        co_await servers.invoke_on_all([addr](echo_server& s) { s.start(addr); });
    } catch (...) {
        failed = std::current_exception();
    }
    if (failed) {
        co_await servers.stop();
        co_await t.stop();
        std::fprintf(stderr, "shoal-echo: %s\n", fmt::format("{}", failed).c_str());
        co_return 1;
    }
    fmt::print("shoal-echo: {} echo on {} ({} shards); Ctrl-C stops\n", t.name,
               servers.local().local_address().to_string(), shard_count());
    std::fflush(stdout);
    co_await stop_requested();
    // Bounded whatever the clients do: connections that have not drained within the shutdown
    // timeout are aborted, so the transport's own teardown below always starts.
    co_await servers.invoke_on_all([](echo_server& s) { return s.stop(); });
    uint64_t conns = co_await servers.map_reduce([](echo_server& s) { return s.connections(); }, uint64_t(0),
                                                 std::plus<>());
    uint64_t aborted =
        co_await servers.map_reduce([](echo_server& s) { return s.aborted(); }, uint64_t(0), std::plus<>());
    co_await servers.stop();
    co_await t.stop();
    fmt::print("shoal-echo: served {} connections\n", conns);
    fmt::print("shoal-echo: {} connections aborted at shutdown\n", aborted);
    if (t.name == "tcp") {
        for (unsigned s = 0; s < shard_count(); ++s) {
            auto st = co_await submit_to(s, [] { return net::tcp::shard_stats(); });
            fmt::print(
                "shard {}: {} recv completions ({} bytes, {} zero-copy, {} copied, {} ring empty, {} paused, "
                "{} arms), {} sends ({} vectored, {} short, {} bytes)\n",
                s, st.recv_completions, st.recv_bytes, st.zero_copy_buffers, st.copied_buffers,
                st.buffer_shortages, st.recv_paused, st.recv_arms, st.sends, st.vectored_sends,
                st.short_sends, st.send_bytes);
        }
    }
    for (unsigned s = 0; s < shard_count(); ++s) {
        auto rs = co_await submit_to(s, [] { return local_reactor().stats(); });
        fmt::print("shard {}: reactor {} loops, {} io_uring_enter, {} SQEs, {} CQEs, {} sleeps\n", s,
                   rs.loops, rs.io_enter_calls, rs.io_submitted, rs.io_completed, rs.sleeps);
    }
    co_return 0;
}

/// What `shoal-echo bench` measures, from the command line; throws std::invalid_argument
/// naming a bad option.
bench_options bench_options_from(const app& a, const std::string& transport_name, const std::string& host) {
    bench_options o;
    for (const auto& s : split(a.get("sizes"), ',')) {
        o.sizes.push_back(size_t(parse_size(s)));
    }
    for (const auto& c : split(a.get("concurrency"), ',')) {
        o.concurrency.push_back(unsigned(parse_size(c)));
    }
    o.duration = seconds_of(a, "duration");
    o.warmup = seconds_of(a, "warmup");
    o.repeat = unsigned(a.get_size("repeat"));
    o.verify = a.has("verify");
    if (a.has("targets")) {
        o.targets = apps::parse_targets(a.get("targets"));
    } else {
        auto addr = net::socket_address::from_host_port(host, port_of(a));
        o.targets.push_back({transport_name, addr});
    }
    return o;
}

future<int> run_client(net::transport t, bench_options o, bool json) {
    co_await t.start();
    std::vector<cell_result> cells;
    std::exception_ptr failed_run;
    try {
        cells = co_await run_bench(t, o);
    } catch (...) {
        failed_run = std::current_exception();
    }
    co_await t.stop();
    if (failed_run) {
        std::rethrow_exception(failed_run);
    }
    if (json) {
        fmt::print("{}", format_json(cells, t.name));
    } else {
        for (const auto& target : o.targets) {
            fmt::print("\n{} ({}, {}):\n\n{}", target.name, target.address.to_string(), t.name,
                       format_table(cells, target.name));
        }
        if (o.targets.size() >= 2) {
            fmt::print("\nside by side:\n\n{}", format_comparison(cells, o.targets));
        }
    }
    uint64_t failed = 0;
    for (const auto& c : cells) {
        failed += c.errors;
    }
    co_return failed ? 1 : 0;
}

} // namespace

int main(int argc, char** argv) {
    app a("shoal-echo", "echo server (`shoal-echo server`) and its benchmark client (`shoal-echo bench`)");
    a.add_option("transport", "tcp or rdma", "tcp");
    a.add_option("host", "server: address to listen on; bench: server to measure", "");
    a.add_option("port", "TCP port", "7000");
    a.add_option("sizes", "bench: request sizes", "128,4K,32K,256K,1M");
    a.add_option("concurrency", "bench: connections per cell", "1,4,16,64");
    a.add_option("duration", "bench: measured seconds per cell", "0.5");
    a.add_option("warmup", "bench: unmeasured seconds before each cell", "0.1");
    a.add_option("repeat", "bench: runs per cell and target, interleaved; the median is reported", "1");
    a.add_option("targets",
                 "bench: several servers side by side, name=host:port[@pid],... (@pid: measure its CPU)");
    a.add_flag("json", "bench: print JSON instead of tables");
    a.add_flag("verify", "bench: compare every echoed byte with the request; a difference fails the client");
    a.add_option("shutdown-timeout-ms",
                 "server: on SIGTERM/SIGINT, how long open connections may drain before they are aborted",
                 "2000");
    a.add_option("recv-buffers", "tcp: receive buffers in each shard's ring", "1024");
    a.add_option("recv-buffer-size", "tcp: size of each receive buffer", "32K");
    net::add_transport_options(a);
    apps::add_metrics_options(a);
    if (auto rc = a.parse(argc, argv)) {
        return *rc;
    }
    const auto& pos = a.positional();
    std::string mode = pos.empty() ? "" : pos[0];
    if (mode != "server" && mode != "bench") {
        std::fprintf(stderr, "usage: shoal-echo server|bench [options] (see --help)\n");
        return 2;
    }
    net::tcp::config tcfg = net::tcp::get_config();
    try {
        tcfg.recv_buffers = unsigned(a.get_size("recv-buffers"));
        tcfg.recv_buffer_size = size_t(a.get_size("recv-buffer-size"));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shoal-echo: %s\n", e.what());
        return 2;
    }
    net::tcp::set_config(tcfg);
    std::string host = a.get("host");
    if (host.empty()) {
        if (mode == "bench" && a.get("transport") == "rdma" && !a.has("targets")) {
            std::fprintf(stderr, "shoal-echo: bench --transport rdma needs --host, the server's RDMA address "
                                 "(rdma_cm cannot use loopback)\n");
            return 2;
        }
        host = mode == "server" ? "0.0.0.0" : "127.0.0.1";
    }
    net::transport t;
    smp_options smp = a.engine_options();
    // Every option is read here, so that a bad value is reported before any shard starts.
    net::socket_address server_addr;
    std::chrono::milliseconds shutdown_timeout{0};
    bench_options bench;
    try {
        t = net::make_transport(a.get("transport"), a);
        if (t.name == "rdma") {
            net::rdma::apply_nic_local_option(a, smp);
        }
        if (mode == "server") {
            server_addr = net::socket_address::from_host_port(host, port_of(a));
            try {
                shutdown_timeout = std::chrono::milliseconds(a.get_size("shutdown-timeout-ms"));
            } catch (const std::exception& e) {
                throw std::invalid_argument(std::string("--shutdown-timeout-ms: ") + e.what());
            }
        } else {
            bench = bench_options_from(a, t.name, host);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shoal-echo: %s\n", e.what());
        return 2;
    }
    try {
        return run_shards(smp, [&]() -> future<int> {
            return apps::with_metrics(a, [&]() -> future<int> {
                return mode == "server" ? run_server(t, server_addr, shutdown_timeout)
                                        : run_client(t, bench, a.has("json"));
            });
        });
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shoal-echo: %s\n", e.what());
        return 1;
    }
}
