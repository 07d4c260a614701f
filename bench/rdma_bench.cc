// shoal-bench-rdma: the RDMA transport measured in one process (server shard 1, client shard 0),
// to put next to perftest in the same Soft-RoCE guest (bench/rdma_vs_perftest.sh).
//   stream round trip (write + flush, read_exactly) at several sizes: median / p99 / mean
//   stream throughput, one direction, 1 MiB writes
//   one-sided READ round trip (one at a time, as perftest's ib_read_lat): median / p99 / mean
//   one-sided WRITE throughput, 1 MiB, several in flight
//   one way, small records: the ring channel against the stream, side by side
// Prints a table; --json for tooling.
#include "bench/pool_bw.hh"
#include "bench/rdma_start.hh"
#include "core/app.hh"
#include "core/future_util.hh"
#include "core/log.hh"
#include "core/smp.hh"
#include "net/rdma/rdma.hh"
#include "net/rdma/services/ring_channel.hh"
#include "net/rdma/services/ring_fan_in.hh"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <deque>
#include <memory>
#include <span>
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

/// The median, 99th percentile and mean of round trips `us` (microseconds) of `size` bytes.
latency_row summarize(size_t size, std::vector<double> us) {
    std::sort(us.begin(), us.end());
    double sum = 0;
    for (double v : us) {
        sum += v;
    }
    return latency_row{size, us[us.size() / 2], us[us.size() * 99 / 100], sum / double(us.size())};
}

struct server_state {
    std::optional<net::server_socket> sock;
    std::optional<net::server_socket> drain;
    std::vector<rdma::connection> keep;
    std::optional<rdma::listener> rc;
    rdma::buffer mem;
    rdma::exported_region exported;
};
server_state srv;

/// A ring consumer on the server shard that takes every message until its producer leaves.
struct ring_server {
    std::optional<rdma::ring_consumer> ring;
    std::optional<rdma::listener> l;
    rdma::connection conn;
};
std::vector<std::unique_ptr<ring_server>> ring_servers;
/// The ring consumers poll their commit index (`--ring-poll`); set before the servers start.
rdma::ring_consumer_options ring_opts;

future<> consume_ring(ring_server& r) {
    for (;;) {
        try {
            (void)co_await r.ring->receive();
        } catch (...) {
            co_return; // the producer closed its connection
        }
    }
}

/// Listens on `a` with a ring of `capacity` bytes offered in the private data.
void start_ring_server(net::socket_address a, size_t capacity) {
    auto r = std::make_unique<ring_server>();
    r->ring.emplace(capacity, ring_opts);
    rdma::listen_options lo;
    lo.connection = rdma::shard_context::local().opts().connection;
    lo.connection->region = r->ring->descriptor();
    r->l.emplace(rdma::listen_rc(a, lo));
    ring_server* rs = r.get();
    ring_servers.push_back(std::move(r));
    (void)rs->l->accept()
        .then([rs](rdma::connection c) {
            rs->conn = c;
            rs->ring->attach(std::move(c));
            return consume_ring(*rs);
        })
        .handle_exception([](std::exception_ptr) {});
}

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
    co_return summarize(size, std::move(us));
}

/// One-sided READs of `size` bytes from the server's exported region, one at a time: what
/// perftest's ib_read_lat measures, through the reactor, the connection and a future per READ.
future<latency_row> measure_read_lat(net::socket_address a, size_t size, unsigned iterations) {
    rdma::connection c = co_await rdma::connect_rc(a);
    rdma::remote_region rr = *c.peer_region();
    rdma::buffer dst = rdma::shard_context::local().pool().allocate(size);
    std::vector<double> us;
    us.reserve(iterations);
    for (unsigned i = 0; i < iterations + iterations / 10; ++i) {
        auto t0 = clk::now();
        co_await c.read(rdma::span_of(dst, 0, size), rr, 0);
        auto t1 = clk::now();
        if (i >= iterations / 10) { // the first tenth warms up
            us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
    }
    co_return summarize(size, std::move(us));
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

/// The ring rows use `ring_producer::send` (a future per record, `--ring-depth` in flight)
/// instead of `write` + `flush` (`--ring-send`).
bool ring_use_send = false;

/// Messages per second `ps` (taken in turn) get into their consumers' rings in `seconds`:
/// `write` each (a ready future while there is room), then `flush` every producer; or, with
/// `ring_use_send`, `send` with `inflight_max` futures in flight in all.
future<double> ring_send_rate(std::vector<rdma::ring_producer>& ps, size_t size, double seconds,
                              size_t inflight_max) {
    std::string msg(size, 'r');
    uint64_t n = 0;
    if (!ring_use_send) {
        const std::span<const char> m(msg.data(), msg.size());
        auto start = clk::now();
        auto end = start + std::chrono::duration<double>(seconds);
        size_t next = 0;
        while (clk::now() < end) {
            co_await ps[next].write(m);
            next = (next + 1) % ps.size();
            ++n;
        }
        for (auto& p : ps) {
            co_await p.flush();
        }
        double secs = std::chrono::duration<double>(clk::now() - start).count();
        co_return double(n) / secs;
    }
    std::deque<future<>> inflight;
    auto start = clk::now();
    auto end = start + std::chrono::duration<double>(seconds);
    size_t next = 0;
    while (clk::now() < end) {
        while (inflight.size() < inflight_max) {
            inflight.push_back(ps[next].send(std::span<const char>(msg.data(), msg.size())));
            next = (next + 1) % ps.size();
        }
        co_await std::move(inflight.front());
        inflight.pop_front();
        ++n;
    }
    for (auto& f : inflight) {
        co_await std::move(f);
        ++n;
    }
    double secs = std::chrono::duration<double>(clk::now() - start).count();
    co_return double(n) / secs;
}

/// Messages per second a ring producer gets into the consumer's ring (`depth` sends in flight).
future<double> measure_ring_rate(net::socket_address a, size_t size, double seconds, unsigned depth) {
    rdma::connection c = co_await rdma::connect_rc(a);
    std::vector<rdma::ring_producer> ps;
    ps.push_back(co_await rdma::ring_producer::open(c, *c.peer_region()));
    co_return co_await ring_send_rate(ps, size, seconds, depth);
}

/// Messages per second through a stream of `size`-byte writes (no message boundaries: the
/// stream gathers small writes), counted until the end of stream was delivered.
future<double> measure_stream_rate(net::socket_address a, size_t size, double seconds) {
    net::connected_socket s = co_await rdma::connect(a);
    net::output_stream out = s.output();
    std::string msg(size, 's');
    uint64_t n = 0;
    auto start = clk::now();
    auto end = start + std::chrono::duration<double>(seconds);
    while (clk::now() < end) {
        co_await out.write(msg);
        ++n;
    }
    co_await out.close();
    double secs = std::chrono::duration<double>(clk::now() - start).count();
    co_return double(n) / secs;
}

/// A fan-in of 4 rings on the server shard taking every message (one listener per producer).
struct fan_in_server {
    std::optional<rdma::ring_fan_in> fan;
    std::vector<rdma::listener> ls;
};
fan_in_server fan_srv;

future<> consume_fan_in() {
    for (;;) {
        try {
            (void)co_await fan_srv.fan->receive();
        } catch (...) {
            co_return; // every producer left
        }
    }
}

void start_fan_in_server(const std::array<net::socket_address, 4>& addrs, size_t capacity) {
    fan_srv.fan.emplace(4, capacity, ring_opts);
    for (unsigned i = 0; i < 4; ++i) {
        rdma::listen_options lo;
        lo.connection = rdma::shard_context::local().opts().connection;
        lo.connection->region = fan_srv.fan->descriptor(i);
        fan_srv.ls.push_back(rdma::listen_rc(addrs[i], lo));
        (void)fan_srv.ls.back()
            .accept()
            .then([i](rdma::connection c) {
                fan_srv.fan->attach(i, std::move(c));
                if (i == 3) {
                    (void)consume_fan_in();
                }
            })
            .handle_exception([](std::exception_ptr) {});
    }
}

/// Messages per second 4 ring producers (one connection each, `depth` sends in flight each)
/// get into one fan-in consumer. Connects once (the fan-in takes one connection per producer).
future<double> measure_fan_in_rate(std::array<net::socket_address, 4> addrs, size_t size, double seconds,
                                   unsigned depth) {
    std::vector<rdma::connection> cs;
    std::vector<rdma::ring_producer> ps;
    for (const auto& a : addrs) {
        cs.push_back(co_await rdma::connect_rc(a));
        ps.push_back(co_await rdma::ring_producer::open(cs.back(), *cs.back().peer_region()));
    }
    co_return co_await ring_send_rate(ps, size, seconds, 4 * size_t(depth));
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

/// The comma-separated items of `list` ("128,4K,64K").
std::vector<std::string> split_sizes(const std::string& list) {
    std::vector<std::string> out;
    for (size_t pos = 0; pos < list.size();) {
        size_t comma = list.find(',', pos);
        out.push_back(list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
        pos = comma == std::string::npos ? list.size() : comma + 1;
    }
    return out;
}

/// The latency rows as JSON members: "rtt" (stream round trips) and "read" (one-sided READs).
void print_latency_json(const std::vector<latency_row>& rtt, const std::vector<latency_row>& read) {
    auto rows = [](const char* name, const std::vector<latency_row>& v) {
        std::printf("\"%s\": [", name);
        for (size_t i = 0; i < v.size(); ++i) {
            std::printf("%s{\"size\": %zu, \"median_us\": %.1f, \"p99_us\": %.1f, \"mean_us\": %.1f}",
                        i ? ", " : "", v[i].size, v[i].median_us, v[i].p99_us, v[i].mean_us);
        }
        std::printf("]");
    };
    rows("rtt", rtt);
    std::printf(", ");
    rows("read", read);
}

/// The latency rows as a table.
void print_latency_text(const std::vector<latency_row>& rtt, const std::vector<latency_row>& read) {
    auto rows = [](const char* title, const std::vector<latency_row>& v) {
        std::printf("%-28s %10s %10s %10s\n", title, "median us", "p99 us", "mean us");
        for (const auto& r : v) {
            std::printf("%-28s %10.1f %10.1f %10.1f\n", fmt::format("  {} B", r.size).c_str(), r.median_us,
                        r.p99_us, r.mean_us);
        }
    };
    rows("stream round trip", rtt);
    rows("one-sided READ round trip", read);
}

/// Stops the servers of the server shard and frees what they hold.
future<> stop_servers(unsigned server_shard) {
    return submit_to(server_shard, [] {
        srv.sock->abort_accept();
        srv.drain->abort_accept();
        srv.rc->abort_accept();
        srv.keep.clear();
        ring_servers.clear();
        fan_srv.ls.clear();
        fan_srv.fan.reset();
        bench::stop_pool_bench_server();
        srv.exported.revoke();
        srv.mem.reset();
    });
}

/// The record sizes of the small-record comparison: one ring (and port) each.
constexpr std::array<size_t, 4> ring_sizes = {64, 1024, 4096, 65536};
/// Bytes of each ring.
constexpr size_t ring_capacity = size_t(1) << 20;

/// Where the server shard listens, on the device's IP.
struct bench_addresses {
    net::socket_address stream; ///< echo streams
    net::socket_address rc;     ///< one-sided READ and WRITE (an exported region)
    net::socket_address drain;  ///< streams that only receive
    std::array<net::socket_address, 4> rings;
    std::array<net::socket_address, 4> fan_in;
    net::socket_address pool;
};

bench_addresses addresses_on(const std::string& ip) {
    bench_addresses to;
    to.stream = net::socket_address::from_host_port(ip, 18515);
    to.rc = net::socket_address::from_host_port(ip, 18516);
    to.drain = net::socket_address::from_host_port(ip, 18517);
    for (size_t i = 0; i < to.rings.size(); ++i) {
        to.rings[i] = net::socket_address::from_host_port(ip, uint16_t(18520 + i));
    }
    for (size_t i = 0; i < to.fan_in.size(); ++i) {
        to.fan_in[i] = net::socket_address::from_host_port(ip, uint16_t(18530 + i));
    }
    to.pool = net::socket_address::from_host_port(ip, 18540);
    return to;
}

/// On the server shard: echo and drain streams, a region of `bw_size` bytes for one-sided
/// operations, the ring channels, the fan-in and the remote memory pool.
void start_servers(const bench_addresses& at, size_t bw_size) {
    srv.sock.emplace(rdma::listen(at.stream));
    (void)keep_doing([] {
        return srv.sock->accept().then(
            [](net::accept_result r) { (void)echo_forever(std::move(r.connection)); });
    }).handle_exception([](std::exception_ptr) {});
    srv.drain.emplace(rdma::listen(at.drain));
    (void)keep_doing([] {
        return srv.drain->accept().then(
            [](net::accept_result r) { (void)drain_forever(std::move(r.connection)); });
    }).handle_exception([](std::exception_ptr) {});
    srv.mem = rdma::shard_context::local().pool().allocate(bw_size);
    srv.exported = rdma::export_region(srv.mem, rdma::access::remote_write | rdma::access::remote_read);
    rdma::listen_options lo;
    lo.connection = rdma::shard_context::local().opts().connection;
    lo.connection->region = srv.exported.descriptor();
    srv.rc.emplace(rdma::listen_rc(at.rc, lo));
    for (const auto& ra : at.rings) {
        start_ring_server(ra, ring_capacity);
    }
    start_fan_in_server(at.fan_in, ring_capacity);
    bench::start_pool_bench_server(at.pool);
    (void)keep_doing([] {
        return srv.rc->accept().then([](rdma::connection c) { srv.keep.push_back(std::move(c)); });
    }).handle_exception([](std::exception_ptr) {});
}

/// The round trips: stream (`sizes`) and one-sided READ (`read_sizes`, at most `bw_size`).
struct latencies {
    std::vector<latency_row> rtt, read;
};

future<latencies> measure_latencies(bench_addresses at, std::string sizes, std::string read_sizes,
                                    size_t bw_size, unsigned iterations) {
    latencies l;
    for (const std::string& one : split_sizes(sizes)) {
        auto before = local_reactor().stats();
        auto cbefore = rdma::shard_context::local().stats();
        future<latency_row> row = measure_rtt(at.stream, parse_size(one), iterations);
        l.rtt.push_back(co_await std::move(row));
        auto after = local_reactor().stats();
        auto cafter = rdma::shard_context::local().stats();
        std::fprintf(stderr,
                     "client shard during %s B: %lu loops, %lu sleeps, %lu CQ events, %lu arms, %lu posts\n",
                     one.c_str(), after.loops - before.loops, after.sleeps - before.sleeps,
                     cafter.cq.cq_events - cbefore.cq.cq_events, cafter.cq.arms - cbefore.cq.arms,
                     cafter.post_send_calls - cbefore.post_send_calls);
    }
    for (const std::string& one : split_sizes(read_sizes)) {
        size_t size = std::min(parse_size(one), bw_size);
        future<latency_row> row = measure_read_lat(at.rc, size, iterations);
        l.read.push_back(co_await std::move(row));
    }
    co_return l;
}

/// The throughput rows.
struct throughputs {
    double stream_mbps = 0; ///< stream, one way, bw_size writes
    double write_mbps = 0;  ///< one-sided WRITE, bw_size, 4 deep
    /// Small records one way, per ring size: ring channel and stream messages per second.
    std::vector<std::pair<double, double>> ring_rows;
    std::vector<double> doorbells_per_record; ///< the ring consumer's receive completions per record
    double fan_in_rate = 0;                   ///< four producers into one consumer, 64 B records
    struct pool_row {
        size_t size;
        double write_mbps, read_mbps;
    };
    std::vector<pool_row> pool_rows; ///< the remote memory pool: leased slices, 4 deep
};

future<throughputs> measure_throughputs(bench_addresses at, size_t bw_size, double seconds,
                                        unsigned ring_depth, unsigned server_shard) {
    throughputs t;
    future<double> sbw = measure_stream_bw(at.drain, bw_size, seconds);
    t.stream_mbps = co_await std::move(sbw);
    future<double> wbw = measure_write_bw(at.rc, bw_size, seconds, 4);
    t.write_mbps = co_await std::move(wbw);
    // Small records one way: the ring channel (one WRITE_WITH_IMM each) against the stream
    // (writes gathered into large messages), side by side.
    for (size_t i = 0; i < ring_sizes.size(); ++i) {
        future<double> rr = measure_ring_rate(at.rings[i], ring_sizes[i], seconds, ring_depth);
        double ring_rate = co_await std::move(rr);
        future<double> sr = measure_stream_rate(at.drain, ring_sizes[i], seconds);
        double stream_rate = co_await std::move(sr);
        t.ring_rows.emplace_back(ring_rate, stream_rate);
        future<double> dpr = submit_to(server_shard, [i] {
            const auto& st = ring_servers[i]->ring->stats();
            return st.messages ? double(st.doorbells) / double(st.messages) : 0.0;
        });
        t.doorbells_per_record.push_back(co_await std::move(dpr));
    }
    future<double> fr = measure_fan_in_rate(at.fan_in, 64, seconds, ring_depth / 4);
    t.fan_in_rate = co_await std::move(fr);
    for (size_t size : {size_t(4096), size_t(1) << 20}) {
        future<double> pw = bench::measure_pool_bw(at.pool, size, true, seconds, 4);
        double w = co_await std::move(pw);
        future<double> pr = bench::measure_pool_bw(at.pool, size, false, seconds, 4);
        double r = co_await std::move(pr);
        t.pool_rows.push_back({size, w, r});
    }
    co_return t;
}

/// Every row as one JSON object.
void print_json(const latencies& l, const throughputs& t, size_t bw_size) {
    std::printf("{");
    print_latency_json(l.rtt, l.read);
    std::printf(", \"ring_polls\": %s, \"ring_api\": \"%s\", \"ring_vs_stream\": [",
                ring_opts.poll ? "true" : "false", ring_use_send ? "send" : "write");
    for (size_t i = 0; i < t.ring_rows.size(); ++i) {
        std::printf("%s{\"size\": %zu, \"ring_msgs_per_s\": %.0f, \"stream_msgs_per_s\": %.0f, "
                    "\"ring_doorbells_per_msg\": %.3f}",
                    i ? ", " : "", ring_sizes[i], t.ring_rows[i].first, t.ring_rows[i].second,
                    t.doorbells_per_record[i]);
    }
    std::printf("], \"fan_in_4x64B_msgs_per_s\": %.0f, \"pool\": [", t.fan_in_rate);
    for (size_t i = 0; i < t.pool_rows.size(); ++i) {
        std::printf("%s{\"size\": %zu, \"remote_write_MBps\": %.1f, \"remote_read_MBps\": %.1f}",
                    i ? ", " : "", t.pool_rows[i].size, t.pool_rows[i].write_mbps, t.pool_rows[i].read_mbps);
    }
    std::printf("], \"stream_MBps\": %.1f, \"write_MBps\": %.1f, \"bw_size\": %zu}\n", t.stream_mbps,
                t.write_mbps, bw_size);
}

/// Every row as a table.
void print_text(const latencies& l, const throughputs& t, size_t bw_size) {
    print_latency_text(l.rtt, l.read);
    std::printf("%-28s %10.1f MB/s\n", fmt::format("stream one way, {} B writes", bw_size).c_str(),
                t.stream_mbps);
    std::printf("%-28s %10.1f MB/s\n", fmt::format("RDMA WRITE, {} B, 4 deep", bw_size).c_str(),
                t.write_mbps);
    std::printf("%-28s %14s %14s %8s %12s\n",
                fmt::format("one way, records ({}{})", ring_use_send ? "send" : "write",
                            ring_opts.poll ? ", polls" : "")
                    .c_str(),
                "ring msg/s", "stream msg/s", "ring/str", "imm/record");
    for (size_t i = 0; i < t.ring_rows.size(); ++i) {
        std::printf("%-28s %14.0f %14.0f %8.2f %12.3f\n", fmt::format("  {} B", ring_sizes[i]).c_str(),
                    t.ring_rows[i].first, t.ring_rows[i].second,
                    t.ring_rows[i].second > 0 ? t.ring_rows[i].first / t.ring_rows[i].second : 0.0,
                    t.doorbells_per_record[i]);
    }
    std::printf("%-28s %14.0f %14.0f %8.2f\n", "  64 B, ring_fan_in 4 prod.", t.fan_in_rate,
                t.ring_rows[0].second,
                t.ring_rows[0].second > 0 ? t.fan_in_rate / t.ring_rows[0].second : 0.0);
    std::printf("%-28s %14s %14s\n", "remote pool, 4 deep", "write MB/s", "read MB/s");
    for (const auto& r : t.pool_rows) {
        std::printf("%-28s %14.1f %14.1f\n", fmt::format("  {} B", r.size).c_str(), r.write_mbps,
                    r.read_mbps);
    }
}

void add_bench_options(app& a) {
    rdma::add_options(a);
    a.add_option("ip", "the RDMA device's IP address (default: $SHOAL_RDMA_IP)");
    a.add_option("iterations", "round trips per size", "2000");
    a.add_option("seconds", "seconds per throughput run", "3");
    a.add_option("sizes", "stream round-trip sizes (empty: none)", "128,4K,64K");
    a.add_option("bw-size", "throughput message size", "1M");
    a.add_option("read-sizes", "one-sided READ round-trip sizes", "128,4K");
    a.add_flag("latency-only", "the round trips alone (stream and one-sided READ), no throughput rows");
    a.add_option("ring-depth", "ring channel sends in flight (--ring-send)", "1024");
    a.add_flag("ring-send", "ring rows: send (a future per record) instead of write + flush");
    a.add_flag("json", "print JSON");
    a.add_flag("ring-poll", "ring consumers poll their commit index (ring_consumer_options::poll)");
    a.add_option("server-shard", "shard of the servers (the client runs on shard 0)", "1");
}

} // namespace

int main(int argc, char** argv) {
    app a("shoal-bench-rdma", "RDMA stream and one-sided throughput/latency in one process");
    add_bench_options(a);
    if (auto rc = a.parse(argc, argv)) {
        return *rc;
    }
    smp_options so = a.engine_options();
    const unsigned server_shard = unsigned(a.get_size("server-shard"));
    ring_opts.poll = a.has("ring-poll");
    ring_use_send = a.has("ring-send");
    so.smp = std::max(server_shard + 1, so.smp);
    so.handle_signals = false;
    return run_shards(so, [&]() -> future<int> {
        future<std::string> started = bench::start_rdma(a);
        const std::string ip = co_await std::move(started);
        const bench_addresses at = addresses_on(ip);
        size_t bw_size = parse_size(a.get("bw-size"));
        // Only trivially destructible captures: GCC 12 may destroy a lambda temporary inside a
        // co_await expression twice (a string captured here crashed with a double free).
        future<> servers_up = submit_to(server_shard, [at, bw_size] { start_servers(at, bw_size); });
        co_await std::move(servers_up);
        future<latencies> measured = measure_latencies(at, a.get("sizes"), a.get("read-sizes"), bw_size,
                                                       unsigned(a.get_size("iterations")));
        const latencies l = co_await std::move(measured);
        if (a.has("latency-only")) {
            if (a.has("json")) {
                std::printf("{");
                print_latency_json(l.rtt, l.read);
                std::printf("}\n");
            } else {
                print_latency_text(l.rtt, l.read);
            }
        } else {
            future<throughputs> rows = measure_throughputs(at, bw_size, std::stod(a.get("seconds")),
                                                           unsigned(a.get_size("ring-depth")), server_shard);
            const throughputs t = co_await std::move(rows);
            if (a.has("json")) {
                print_json(l, t, bw_size);
            } else {
                print_text(l, t, bw_size);
            }
        }
        co_await stop_servers(server_shard);
        co_await rdma::stop();
        co_return 0;
    });
}
