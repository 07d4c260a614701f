#pragma once
// Starting RDMA in a bench program (shoal-bench-rdma, shoal-bench-pool) from its command line.
#include "core/app.hh"
#include "core/future.hh"
#include "net/rdma/rdma.hh"

#include <cstdlib>
#include <string>

namespace shoal::bench {

/// Starts RDMA on every shard with the options of `a` (rdma::add_options) on the device of
/// `--ip` (else $SHOAL_RDMA_IP); resolves to that address.
inline future<std::string> start_rdma(const app& a) {
    net::rdma::options o = net::rdma::options_from(a);
    std::string ip = a.get("ip");
    if (ip.empty() && std::getenv("SHOAL_RDMA_IP")) {
        ip = std::getenv("SHOAL_RDMA_IP");
    }
    o.device.address = ip;
    co_await net::rdma::start(o);
    co_return ip;
}

} // namespace shoal::bench
