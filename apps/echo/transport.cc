#include "apps/echo/transport.hh"

#include "core/app.hh"
#include "net/rdma/connection.hh"
#include "net/rdma/context.hh"
#include "net/rdma/options.hh"
#include "net/tcp/tcp.hh"

#include <stdexcept>

namespace shoal::echo {

std::vector<std::string> transport_names() {
    return {"tcp", "rdma"};
}

void add_transport_options(app& a) {
    net::rdma::add_options(a);
}

namespace {

transport make(std::string_view name, const app* a) {
    if (name == "tcp") {
        return transport{
            "tcp",
            [](const net::socket_address& addr, const net::listen_options& o) {
                return net::tcp::listen(addr, o);
            },
            [](const net::socket_address& addr) { return net::tcp::connect(addr); },
        };
    }
    if (name == "rdma") {
        net::rdma::options opts = a ? net::rdma::options_from(*a) : net::rdma::options{};
        return transport{
            "rdma",
            // rdma_cm spreads one listening address over every shard that listens on it, so the
            // echo server's per-shard listen works as SO_REUSEPORT does for TCP.
            [](const net::socket_address& addr, const net::listen_options&) {
                return net::rdma::listen(addr);
            },
            [](const net::socket_address& addr) { return net::rdma::connect(addr); },
            [opts] { return net::rdma::start(opts); },
            [] { return net::rdma::stop(); },
        };
    }
    std::string known;
    for (const auto& n : transport_names()) {
        known += known.empty() ? n : ", " + n;
    }
    throw std::invalid_argument("unknown transport '" + std::string(name) + "' (known: " + known + ")");
}

} // namespace

transport make_transport(std::string_view name) {
    return make(name, nullptr);
}

transport make_transport(std::string_view name, const app& a) {
    return make(name, &a);
}

} // namespace shoal::echo
