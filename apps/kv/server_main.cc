// shoal-kv: a memcached-compatible key-value server, one store and one listener per shard.
//
//   shoal-kv [-p 11211] [-l 0.0.0.0] [-m 64] [-c 1024] [-I 1m] [-U 0] [--smp N] [--cpuset ...]
//
// memcached's options mean what they mean to memcached: -m is megabytes for the whole server
// (split evenly over the shards), -I the largest item, -c the connection limit (the open-files
// limit is raised to fit it at start, or shoal-kv exits with status 71). See docs/kv.md.

#include "apps/common/metrics.hh"
#include "apps/kv/memcached_args.hh"
#include "core/app.hh"
#include "core/coroutine.hh"
#include "core/log.hh"
#include "core/sharded.hh"
#include "kv/server/metrics.hh"
#include "kv/server/rdma_server.hh"
#include "kv/server/registered_page_source.hh"
#include "kv/server/server.hh"
#include "net/rdma/rdma.hh"
#include "net/socket_address.hh"

#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include <fmt/core.h>

using namespace shoal;

namespace {

/// A number of megabytes (memcached's -m) or a size with a suffix (64M, 1G).
uint64_t megabytes_or_size(const std::string& text) {
    bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
    return digits ? parse_size(text) << 20 : parse_size(text);
}

/// The native RDMA front end, when asked for (--rdma-port): started before the stores, whose
/// pages it registers, and stopped after them.
struct rdma_front {
    std::optional<net::socket_address> addr;
    bool rdma_started = false;
    sharded<kv::rdma_server> servers;
    bool servers_started = false;

    future<> start_device(kv::server_config& cfg) {
        if (!addr) {
            co_return;
        }
        co_await net::rdma::start();
        rdma_started = true;
        cfg.store.remote_readable = true;
        cfg.page_source_factory = [](size_t page, size_t pages) -> std::unique_ptr<kv::page_source> {
            return std::make_unique<kv::registered_page_source>(net::rdma::shard_context::local().pd(), page,
                                                                pages, false);
        };
    }
    future<> listen(sharded<kv::server>& stores) {
        if (!addr) {
            co_return;
        }
        co_await servers.start(kv::rdma_server_config{}, &stores);
        servers_started = true;
        addr = co_await kv::rdma_listen_on_all_shards(servers, *addr);
    }
    future<> stop_servers() {
        if (servers_started) {
            co_await servers.stop();
        }
    }
    future<> stop_device() {
        if (rdma_started) {
            co_await net::rdma::stop();
        }
    }
};

future<int> run(kv::server_config cfg, net::socket_address addr,
                std::optional<net::socket_address> rdma_addr) {
    kv::shared_counters counters;
    sharded<kv::server> servers;
    rdma_front front;
    front.addr = rdma_addr;
    std::exception_ptr failed;
    try {
        co_await front.start_device(cfg);
    } catch (...) {
        failed = std::current_exception();
    }
    if (failed) {
        std::fprintf(stderr, "shoal-kv: --rdma-port: %s\n", fmt::format("{}", failed).c_str());
        co_return 1;
    }
    co_await servers.start(cfg, &servers, &counters);
    try {
        addr = co_await kv::listen_on_all_shards(servers, addr);
        co_await front.listen(servers);
    } catch (...) {
        failed = std::current_exception();
    }
    if (failed) {
        co_await front.stop_servers();
        co_await servers.stop();
        co_await front.stop_device();
        std::fprintf(stderr, "shoal-kv: %s\n", fmt::format("{}", failed).c_str());
        co_return 1;
    }
    apps::shard_metric_groups published;
    co_await published.publish([&servers] { return kv::publish_metrics(servers.local()); });
    fmt::print("shoal-kv: listening on {} (memcached text protocol, {} shards, {} MB, max item {} bytes)\n",
               addr.to_string(), shard_count(), cfg.limit_maxbytes >> 20, cfg.store.max_item_size);
    if (front.addr) {
        fmt::print("shoal-kv: native RDMA protocol on {} (+ shard: one port per shard)\n",
                   front.addr->to_string());
    }
    std::fflush(stdout);
    co_await stop_requested();
    fmt::print("shoal-kv: stopping\n");
    std::fflush(stdout);
    co_await published.clear();
    co_await front.stop_servers();
    co_await servers.stop();
    co_await front.stop_device();
    fmt::print("shoal-kv: stopped\n");
    co_return 0;
}

} // namespace

int main(int argc, char** argv) {
    app a("shoal-kv", "memcached-compatible key-value server (text and meta protocol over TCP)");
    a.add_option("port", "-p: TCP port", "11211");
    a.add_option("listen", "-l: address to listen on", "0.0.0.0");
    a.add_option("memory", "-m: memory for items, megabytes (or 512K, 2G...), split over the shards", "64");
    a.add_option("max-connections", "-c: simultaneous connections", "1024");
    a.add_option("max-item-size", "-I: largest item (1m, 512k, bytes)", "1m");
    a.add_option("udp-port", "-U: only 0 (UDP off) is accepted", "0");
    a.add_option("threads", "-t: accepted for memcached compatibility; use --smp", "");
    a.add_option("rdma-port", "native RDMA protocol: base port (shard s listens on it + s); empty: off", "");
    a.add_option("rdma-listen", "address of the RDMA device for --rdma-port (default: --listen)", "");
    a.add_option("drain-ms", "on SIGTERM, how long connections may drain before they are aborted", "2000");
    a.add_option("idle-timeout", "-o idle_timeout=N: close a connection silent for N seconds (0: never)",
                 "0");
    apps::add_metrics_options(a);
    auto args = kv_app::translate_memcached_args(argc, argv);
    std::vector<char*> argp;
    for (auto& s : args) {
        argp.push_back(s.data());
    }
    if (auto rc = a.parse(int(argp.size()), argp.data())) {
        return *rc;
    }
    kv::server_config cfg;
    net::socket_address addr;
    std::optional<net::socket_address> rdma_addr;
    size_t metrics_connections = 0;
    try {
        metrics_connections = apps::metrics_max_connections(a);
        if (a.get("udp-port") != "0") {
            throw std::invalid_argument("-U/--udp-port: UDP is not supported, only 0 is accepted");
        }
        uint64_t port = a.get_size("port");
        if (port > 65535) {
            throw std::invalid_argument("--port " + a.get("port") + ": a port is 0..65535");
        }
        cfg.port = uint16_t(port);
        cfg.limit_maxbytes = megabytes_or_size(a.get("memory"));
        cfg.max_connections = unsigned(a.get_size("max-connections"));
        cfg.store.max_item_size = size_t(a.get_size("max-item-size"));
        if (cfg.store.max_item_size < 1024 || cfg.store.max_item_size > (1u << 30)) {
            throw std::invalid_argument("-I/--max-item-size: between 1k and 1g");
        }
        cfg.limits.max_item_size = cfg.store.max_item_size;
        cfg.drain_timeout = std::chrono::milliseconds(a.get_size("drain-ms"));
        cfg.idle_timeout = std::chrono::seconds(a.get_size("idle-timeout"));
        addr = net::socket_address::from_host_port(a.get("listen"), cfg.port);
        if (!a.get("rdma-port").empty()) {
            uint64_t rport = a.get_size("rdma-port");
            if (rport == 0 || rport > 65535) {
                throw std::invalid_argument("--rdma-port " + a.get("rdma-port") + ": a port is 1..65535");
            }
            std::string host = a.get("rdma-listen").empty() ? a.get("listen") : a.get("rdma-listen");
            rdma_addr = net::socket_address::from_host_port(host, uint16_t(rport));
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shoal-kv: %s\n", e.what());
        return 2;
    }
    smp_options smp = a.engine_options();
    // As memcached does: raise the open-files limit to what -c needs, or refuse to start.
    kv_app::fd_needs needs;
    needs.max_connections = cfg.max_connections;
    needs.shards =
        smp.smp ? smp.smp
                : unsigned(smp.cpuset.empty() ? std::thread::hardware_concurrency() : smp.cpuset.size());
    needs.metrics_connections = metrics_connections;
    needs.rdma = rdma_addr.has_value();
    if (std::string err = kv_app::raise_fd_limit(kv_app::needed_fds(needs), cfg.max_connections);
        !err.empty()) {
        std::fprintf(stderr, "shoal-kv: %s\n", err.c_str());
        return 71; // memcached's EX_OSERR
    }
    try {
        return run_shards(smp, [&]() -> future<int> {
            cfg.store.memory_limit = size_t(cfg.limit_maxbytes / shard_count());
            return apps::with_metrics(a, [&] { return run(cfg, addr, rdma_addr); });
        });
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shoal-kv: %s\n", e.what());
        return 1;
    }
}
