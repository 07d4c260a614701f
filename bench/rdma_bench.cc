// shoal-bench-rdma: the RDMA transport measured in one process (server shard 1, client shard 0),
// to put next to perftest in the same Soft-RoCE guest (bench/rdma_vs_perftest.sh).
//   stream round trip (write + flush, read_exactly) at several sizes: median / p99 / mean
//   stream throughput, one direction, 1 MiB writes
//   one-sided WRITE throughput, 1 MiB, several in flight
// Prints a table; --json for tooling.
#include "core/app.hh"
#include "core/future_util.hh"
#include "core/log.hh"
#include "core/smp.hh"
#include "net/rdma/rdma.hh"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

using namespace shoal;
namespace rdma = shoal::net::rdma;
using clk = std::chrono::steady_clock;

namespace {

struct latency_row {
    size_t size;
    double median_us, p99_us, mean_us;
};

struct server_state {
    std::optional<net::server_socket> sock;
    std::optional<net::server_socket> drain;
    std::vector<rdma::connection> keep;
    std::optional<rdma::listener> rc;
    rdma::buffer mem;
    rdma::exported_region exported;
};
server_state srv;

future<> echo_forever(net::connected_socket s) {
    net::input_stream in = s.input();
    net::output_stream out = s.output();
    for (;;) {
        net::temporary_buffer b = co_await in.read();
        if (b.empty()) {
            break;
        }
        co_await out.write(std::move(b));
        co_await out.flush();
    }
    co_await out.close();
}

future<> drain_forever(net::connected_socket s) {
    net::input_stream in = s.input();
    for (;;) {
        net::temporary_buffer b = co_await in.read();
        if (b.empty()) {
            break;
        }
    }
}

future<latency_row> measure_rtt(net::socket_address a, size_t size, unsigned iterations) {
    rdma::connection c = co_await rdma::connect_rc(a);
    net::connected_socket s = c.socket();
    net::input_stream in = s.input();
    net::output_stream out = s.output();
    std::string msg(size, 'x');
    std::vector<double> us;
    us.reserve(iterations);
    for (unsigned i = 0; i < iterations + iterations / 10; ++i) {
        auto t0 = clk::now();
        co_await out.write(msg);
        co_await out.flush();
        net::temporary_buffer b = co_await in.read_exactly(size);
        auto t1 = clk::now();
        if (i >= iterations / 10) { // the first tenth warms up
            us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
    }
    co_await out.close();
    const rdma::connection_stats& st = c.stats();
    std::fprintf(
        stderr,
        "client connection, %zu B: %lu messages sent (%lu inline), %lu credit-only sent, %lu received, "
        "%lu signaled, %lu unsignaled, %lu credit stalls\n",
        size, st.messages_sent, st.inline_sends, st.ctrl_sent, st.ctrl_received, st.signaled, st.unsignaled,
        st.credit_stalls);
    std::sort(us.begin(), us.end());
    double sum = 0;
    for (double v : us) {
        sum += v;
    }
    co_return latency_row{size, us[us.size() / 2], us[us.size() * 99 / 100], sum / double(us.size())};
}

future<double> measure_stream_bw(net::socket_address a, size_t size, double seconds) {
    net::connected_socket s = co_await rdma::connect(a);
    net::output_stream out = s.output();
    std::string block(size, 'y');
    uint64_t bytes = 0;
    auto start = clk::now();
    auto end = start + std::chrono::duration<double>(seconds);
    while (clk::now() < end) {
        co_await out.write(block);
        bytes += size;
    }
    co_await out.close(); // returns once the end of stream (after all data) was delivered
    double secs = std::chrono::duration<double>(clk::now() - start).count();
    co_return double(bytes) / secs / 1e6;
}

future<double> measure_write_bw(net::socket_address a, size_t size, double seconds, unsigned depth) {
    rdma::connection c = co_await rdma::connect_rc(a);
    rdma::remote_region rr = *c.peer_region();
    rdma::buffer src = rdma::shard_context::local().pool().allocate(size);
    uint64_t bytes = 0;
    auto start = clk::now();
    auto end = start + std::chrono::duration<double>(seconds);
    std::vector<future<>> inflight;
    while (clk::now() < end) {
        while (inflight.size() < depth) {
            inflight.push_back(c.write(rdma::span_of(src, 0, size), rr, 0));
        }
        co_await std::move(inflight.front());
        inflight.erase(inflight.begin());
        bytes += size;
    }
    for (auto& f : inflight) {
        co_await std::move(f);
        bytes += size;
    }
    double secs = std::chrono::duration<double>(clk::now() - start).count();
    co_return double(bytes) / secs / 1e6;
}

} // namespace

int main(int argc, char** argv) {
    app a("shoal-bench-rdma", "RDMA stream and one-sided throughput/latency in one process");
    rdma::add_options(a);
    a.add_option("ip", "the RDMA device's IP address (default: $SHOAL_RDMA_IP)");
    a.add_option("iterations", "round trips per size", "2000");
    a.add_option("seconds", "seconds per throughput run", "3");
    a.add_option("sizes", "round-trip sizes", "128,4K,64K");
    a.add_option("bw-size", "throughput message size", "1M");
    a.add_flag("json", "print JSON");
    a.add_option("server-shard", "shard of the servers (the client runs on shard 0)", "1");
    if (auto rc = a.parse(argc, argv)) {
        return *rc;
    }
    smp_options so = a.engine_options();
    const unsigned server_shard = unsigned(a.get_size("server-shard"));
    so.smp = std::max(server_shard + 1, so.smp);
    so.handle_signals = false;
    return run_shards(so, [&]() -> future<int> {
        rdma::options o = rdma::options_from(a);
        std::string ip = a.get("ip");
        if (ip.empty() && std::getenv("SHOAL_RDMA_IP")) {
            ip = std::getenv("SHOAL_RDMA_IP");
        }
        o.device.address = ip;
        co_await rdma::start(o);
        auto stream_addr = net::socket_address::from_host_port(ip, 18515);
        auto rc_addr = net::socket_address::from_host_port(ip, 18516);
        auto drain_addr = net::socket_address::from_host_port(ip, 18517);
        size_t bw_size = parse_size(a.get("bw-size"));
        // Server on shard 1: echo/drain streams, and a region for one-sided writes.
        co_await submit_to(server_shard, [stream_addr, rc_addr, drain_addr, bw_size] {
            srv.sock.emplace(rdma::listen(stream_addr));
            (void)keep_doing([] {
                return srv.sock->accept().then(
                    [](net::accept_result r) { (void)echo_forever(std::move(r.connection)); });
            }).handle_exception([](std::exception_ptr) {});
            srv.drain.emplace(rdma::listen(drain_addr));
            (void)keep_doing([] {
                return srv.drain->accept().then(
                    [](net::accept_result r) { (void)drain_forever(std::move(r.connection)); });
            }).handle_exception([](std::exception_ptr) {});
            srv.mem = rdma::shard_context::local().pool().allocate(bw_size);
            srv.exported = rdma::export_region(srv.mem, rdma::access::remote_write);
            rdma::listen_options lo;
            lo.connection = rdma::shard_context::local().opts().connection;
            lo.connection->region = srv.exported.descriptor();
            srv.rc.emplace(rdma::listen_rc(rc_addr, lo));
            (void)keep_doing([] {
                return srv.rc->accept().then([](rdma::connection c) { srv.keep.push_back(std::move(c)); });
            }).handle_exception([](std::exception_ptr) {});
        });
        std::vector<latency_row> lat;
        unsigned iterations = unsigned(a.get_size("iterations"));
        std::string sizes = a.get("sizes");
        for (size_t pos = 0; pos < sizes.size();) {
            size_t comma = sizes.find(',', pos);
            std::string one = sizes.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
            auto before = local_reactor().stats();
            auto cbefore = rdma::shard_context::local().stats();
            future<latency_row> row = measure_rtt(stream_addr, parse_size(one), iterations);
            lat.push_back(co_await std::move(row));
            auto after = local_reactor().stats();
            auto cafter = rdma::shard_context::local().stats();
            std::fprintf(
                stderr,
                "client shard during %s B: %lu loops, %lu sleeps, %lu CQ events, %lu arms, %lu posts\n",
                one.c_str(), after.loops - before.loops, after.sleeps - before.sleeps,
                cafter.cq.cq_events - cbefore.cq.cq_events, cafter.cq.arms - cbefore.cq.arms,
                cafter.post_send_calls - cbefore.post_send_calls);
            pos = comma == std::string::npos ? sizes.size() : comma + 1;
        }
        double seconds = std::stod(a.get("seconds"));
        future<double> sbw = measure_stream_bw(drain_addr, bw_size, seconds);
        double stream_mbps = co_await std::move(sbw);
        future<double> wbw = measure_write_bw(rc_addr, bw_size, seconds, 4);
        double write_mbps = co_await std::move(wbw);
        if (a.has("json")) {
            std::printf("{\"rtt\": [");
            for (size_t i = 0; i < lat.size(); ++i) {
                std::printf("%s{\"size\": %zu, \"median_us\": %.1f, \"p99_us\": %.1f, \"mean_us\": %.1f}",
                            i ? ", " : "", lat[i].size, lat[i].median_us, lat[i].p99_us, lat[i].mean_us);
            }
            std::printf("], \"stream_MBps\": %.1f, \"write_MBps\": %.1f, \"bw_size\": %zu}\n", stream_mbps,
                        write_mbps, bw_size);
        } else {
            std::printf("%-28s %10s %10s %10s\n", "stream round trip", "median us", "p99 us", "mean us");
            for (auto& r : lat) {
                std::printf("%-28s %10.1f %10.1f %10.1f\n", fmt::format("  {} B", r.size).c_str(),
                            r.median_us, r.p99_us, r.mean_us);
            }
            std::printf("%-28s %10.1f MB/s\n", fmt::format("stream one way, {} B writes", bw_size).c_str(),
                        stream_mbps);
            std::printf("%-28s %10.1f MB/s\n", fmt::format("RDMA WRITE, {} B, 4 deep", bw_size).c_str(),
                        write_mbps);
        }
        co_await submit_to(server_shard, [] {
            srv.sock->abort_accept();
            srv.drain->abort_accept();
            srv.rc->abort_accept();
            srv.keep.clear();
            srv.exported.revoke();
            srv.mem.reset();
        });
        co_await rdma::stop();
        co_return 0;
    });
}
