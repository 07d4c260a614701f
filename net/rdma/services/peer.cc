// A peer: one control connection for messages and a group of RC connections for one-sided work.
#include "net/rdma/services/peer.hh"

#include "net/rdma/context.hh"

#include <cstring>
#include <stdexcept>

namespace shoal::net::rdma {

future<peer> peer::connect(const net::socket_address& addr, unsigned data_connections,
                           const connection_options& opts) {
    if (data_connections == 0) {
        throw std::invalid_argument("rdma::peer::connect: at least one one-sided connection is needed");
    }
    peer p;
    try {
        p._control = co_await connect_rc(addr, opts);
        p._messages = p._control.messages();
        p._data.reserve(data_connections);
        p._data_messages.reserve(data_connections);
        for (unsigned i = 0; i < data_connections; ++i) {
            p._data.push_back(co_await connect_rc(addr, opts));
            p._data_messages.push_back(p._data.back().messages());
            peer_hello h;
            h.index = i;
            net::temporary_buffer b(sizeof(h));
            std::memcpy(b.get_write(), &h, sizeof(h));
            co_await p._data_messages.back().send(std::move(b));
        }
    } catch (...) {
        p.close();
        throw;
    }
    co_return p;
}

future<peer> peer::connect(const net::socket_address& addr, unsigned data_connections) {
    return connect(addr, data_connections, shard_context::local().opts().connection);
}

connection& peer::one_sided() noexcept {
    for (size_t tries = 0; tries < _data.size(); ++tries) {
        connection& c = _data[_next];
        _next = (_next + 1) % unsigned(_data.size());
        if (c.usable()) {
            return c;
        }
    }
    return _data[(_next + unsigned(_data.size()) - 1) % unsigned(_data.size())];
}

void peer::close() noexcept {
    for (auto& c : _data) {
        if (c) {
            c.close();
        }
    }
    if (_control) {
        _control.close();
    }
}

} // namespace shoal::net::rdma
