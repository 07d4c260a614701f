// shoal-bench-pool: the remote memory pool alone (seed 003), in one process: a pool server on
// shard 1, a client on shard 0 that leases one slice per operation in flight and measures
// remote_write / remote_read MB/s at each size. bench/pool_vs_perftest.sh runs it next to
// perftest's ib_write_bw / ib_read_bw in one Soft-RoCE guest. One line per cell:
//   pool <write|read> <size> B depth <d> connections <c>: <MB/s> MB/s
#include "bench/pool_bw.hh"
#include "bench/rdma_start.hh"
#include "core/app.hh"
#include "core/smp.hh"
#include "net/rdma/rdma.hh"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

using namespace shoal;
namespace rdma = shoal::net::rdma;

int main(int argc, char** argv) {
    app a("shoal-bench-pool", "remote_write / remote_read of leased slices of a remote memory pool");
    rdma::add_options(a);
    a.add_option("ip", "the RDMA device's IP address (default: $SHOAL_RDMA_IP)");
    a.add_option("sizes", "slice sizes", "4K,1M");
    a.add_option("ops", "write, read or write,read", "write,read");
    a.add_option("depth", "operations in flight (one leased slice each)", "16");
    a.add_option("connections", "one-sided connections of the client's peer", "2");
    a.add_option("seconds", "seconds per cell", "3");
    a.add_option("port", "the pool server's port", "18550");
    if (auto rc = a.parse(argc, argv)) {
        return *rc;
    }
    smp_options so = a.engine_options();
    so.smp = std::max(2u, so.smp);
    so.handle_signals = false;
    return run_shards(so, [&]() -> future<int> {
        future<std::string> started = bench::start_rdma(a);
        const std::string ip = co_await std::move(started);
        const auto addr = net::socket_address::from_host_port(ip, uint16_t(a.get_size("port")));
        co_await submit_to(1, [addr] { bench::start_pool_bench_server(addr); });
        const auto depth = unsigned(a.get_size("depth"));
        const auto conns = unsigned(a.get_size("connections"));
        const double seconds = std::stod(a.get("seconds"));
        const std::string ops = a.get("ops");
        std::vector<size_t> sizes;
        const std::string list = a.get("sizes");
        for (size_t pos = 0; pos < list.size();) {
            size_t comma = std::min(list.find(',', pos), list.size());
            sizes.push_back(parse_size(list.substr(pos, comma - pos)));
            pos = comma + 1;
        }
        int status = 0;
        for (size_t size : sizes) {
            for (bool write : {true, false}) {
                if (ops.find(write ? "write" : "read") == std::string::npos) {
                    continue;
                }
                try {
                    future<double> f = bench::measure_pool_bw(addr, size, write, seconds, depth, conns);
                    double mbps = co_await std::move(f);
                    std::printf("pool %s %zu B depth %u connections %u: %.1f MB/s\n",
                                write ? "write" : "read", size, depth, conns, mbps);
                } catch (const std::exception& e) {
                    std::printf("pool %s %zu B: error: %s\n", write ? "write" : "read", size, e.what());
                    status = 1;
                }
                std::fflush(stdout);
            }
        }
        co_await submit_to(1, [] { bench::stop_pool_bench_server(); });
        co_await rdma::stop();
        co_return status;
    });
}
