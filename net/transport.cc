#include "net/transport.hh"

#include "core/app.hh"
#include "net/rdma/connection.hh"
#include "net/rdma/context.hh"
#include "net/rdma/options.hh"
#include "net/tcp/tcp.hh"

#include <stdexcept>

namespace shoal::net {

std::vector<std::string> transport_names() {
    return {"tcp", "rdma"};
}

void add_transport_options(app& a) {
    rdma::add_options(a);
}

namespace {

transport make(std::string_view name, const app* a) {
    if (name == "tcp") {
        return transport{
            "tcp",
            [](const socket_address& addr, const listen_options& o) { return tcp::listen(addr, o); },
            [](const socket_address& addr) { return tcp::connect(addr); },
            [](const socket_address& addr, abort_source& as) { return tcp::connect(addr, {}, as); },
        };
    }
    if (name == "rdma") {
        rdma::options opts = a ? rdma::options_from(*a) : rdma::options{};
        return transport{
            "rdma",
            // rdma_cm spreads one listening address over every shard that listens on it, so the
            // echo server's per-shard listen works as SO_REUSEPORT does for TCP.
            [](const socket_address& addr, const listen_options&) { return rdma::listen(addr); },
            [](const socket_address& addr) { return rdma::connect(addr); },
            [](const socket_address& addr, abort_source& as) {
                auto* ctx = rdma::shard_context::local_or_null();
                return rdma::connect(addr, ctx ? ctx->opts().connection : rdma::connection_options{}, as);
            },
            [opts] { return rdma::start(opts); },
            [] { return rdma::stop(); },
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

} // namespace shoal::net
