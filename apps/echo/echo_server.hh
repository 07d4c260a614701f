#pragma once

#include "core/future.hh"
#include "core/gate.hh"
#include "net/socket_address.hh"
#include "net/stream.hh"
#include "net/transport.hh"

#include <cstdint>
#include <list>

namespace shoal::echo {

/// One shard's echo service: listens (with SO_REUSEPORT, so every shard may listen on the same
/// port) and sends back every byte each connection receives, until the peer closes. Use it as
/// `sharded<echo_server>`.
class echo_server {
public:
    /// A server that listens through `t`.
    explicit echo_server(net::transport t)
        : _t(std::move(t)) {}

    /// Listens on `addr` and starts accepting. Throws what the transport's listen throws.
    void start(const net::socket_address& addr, net::listen_options opts = {});
    /// Stops accepting, ends every open connection (their input sees end of stream, their output
    /// is closed once drained) and resolves when all of them are done.
    future<> stop();

    /// The address listened on (the port picked when it was 0).
    net::socket_address local_address() const { return _ss.local_address(); }
    /// Connections accepted so far.
    uint64_t connections() const noexcept { return _connections; }
    /// Bytes received so far (each is written back).
    uint64_t bytes() const noexcept { return _bytes; }
    /// Connections that ended with an error (peer reset...).
    uint64_t errors() const noexcept { return _errors; }

private:
    future<> accept_loop();
    future<> serve(net::connected_socket s);

    net::transport _t;
    net::server_socket _ss;
    gate _gate;
    std::list<net::connected_socket> _open;
    uint64_t _connections = 0;
    uint64_t _bytes = 0;
    uint64_t _errors = 0;
};

} // namespace shoal::echo
