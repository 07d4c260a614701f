#pragma once
// The remote memory pool measured (shared by shoal-bench-rdma and shoal-bench-pool): a pool
// server serving every connection of one listener, and the MB/s of remote_write/remote_read of
// leased slices.
#include "core/future.hh"
#include "core/future_util.hh"
#include "net/rdma/rdma.hh"
#include "net/rdma/services/peer.hh"
#include "net/rdma/services/remote_pool.hh"

#include <chrono>
#include <deque>
#include <exception>
#include <optional>
#include <vector>

namespace shoal::bench {

/// A remote memory pool server on its shard, serving every connection of one listener.
struct pool_bench_server {
    std::optional<net::rdma::listener> l;
    std::optional<net::rdma::remote_pool_server> srv;
};

/// The pool server of this process (started on the server shard).
inline pool_bench_server pool_bench_srv;

/// Starts the pool server on this shard, listening on `a` (default limits: 64 MiB per client).
inline void start_pool_bench_server(const net::socket_address& a) {
    pool_bench_srv.l.emplace(net::rdma::listen_rc(a));
    pool_bench_srv.srv.emplace();
    (void)keep_doing([] {
        return pool_bench_srv.l->accept().then(
            [](net::rdma::connection c) { (void)pool_bench_srv.srv->serve(std::move(c)); });
    }).handle_exception([](std::exception_ptr) {});
}

/// Stops the pool server (on its shard): no more accepts, every lease revoked.
inline void stop_pool_bench_server() {
    pool_bench_srv.l->abort_accept();
    pool_bench_srv.srv.reset();
}

/// MB/s of remote_write (or remote_read) of `size`-byte slices leased from the pool server at
/// `a`, `depth` in flight (one slice each) for `seconds`, over a peer with `data_connections`
/// one-sided connections; one local registered buffer is the source (destination) of all.
inline future<double> measure_pool_bw(net::socket_address a, size_t size, bool write, double seconds,
                                      unsigned depth, unsigned data_connections = 2) {
    namespace rdma = net::rdma;
    using clk = std::chrono::steady_clock;
    rdma::peer p = co_await rdma::peer::connect(a, data_connections);
    rdma::remote_pool_client pool(p);
    std::vector<rdma::remote_region> slices;
    for (unsigned i = 0; i < depth; ++i) {
        slices.push_back(co_await pool.allocate(size, 4096));
    }
    rdma::buffer local = rdma::shard_context::local().pool().allocate(size);
    uint64_t bytes = 0;
    std::deque<future<>> inflight;
    auto start = clk::now();
    auto end = start + std::chrono::duration<double>(seconds);
    unsigned k = 0;
    while (clk::now() < end) {
        while (inflight.size() < depth) {
            const auto& r = slices[k++ % depth];
            inflight.push_back(write ? pool.remote_write(rdma::span_of(local, 0, size), r)
                                     : pool.remote_read(rdma::span_of(local, 0, size), r));
        }
        co_await std::move(inflight.front());
        inflight.pop_front();
        bytes += size;
    }
    for (auto& f : inflight) {
        co_await std::move(f);
        bytes += size;
    }
    double secs = std::chrono::duration<double>(clk::now() - start).count();
    p.close();
    co_return double(bytes) / secs / 1e6;
}

} // namespace shoal::bench
