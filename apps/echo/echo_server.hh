#pragma once

#include "core/clock.hh"
#include "core/future.hh"
#include "net/server_connections.hh"
#include "net/socket_address.hh"
#include "net/stream.hh"
#include "net/transport.hh"

#include <chrono>
#include <cstdint>

namespace shoal::echo {

/// One shard's echo service: listens (with SO_REUSEPORT, so every shard may listen on the same
/// port) and sends back every byte each connection receives, until the peer closes. Use it as
/// `sharded<echo_server>`.
class echo_server {
public:
    /// How long `stop()` lets connections finish by default.
    static constexpr std::chrono::milliseconds default_shutdown_timeout{2000};

    /// A server that listens through `t`; `stop()` waits at most `shutdown_timeout` for open
    /// connections to drain before aborting them.
    explicit echo_server(net::transport t,
                         steady_clock_type::duration shutdown_timeout = default_shutdown_timeout)
        : _t(std::move(t))
        , _shutdown_timeout(shutdown_timeout) {}

    /// Listens on `addr` and starts accepting. Throws what the transport's listen throws.
    void start(const net::socket_address& addr, net::listen_options opts = {});
    /// Stops accepting and ends every open connection: its input sees end of stream and its
    /// output is closed once drained; connections still open after the shutdown timeout (a peer
    /// that does not read) are aborted. Resolves when all of them are done. A second call, once
    /// the first resolved, does nothing.
    future<> stop();

    /// The address listened on (the port picked when it was 0).
    net::socket_address local_address() const { return _ss.local_address(); }
    /// Connections accepted so far.
    uint64_t connections() const noexcept { return _conns.served(); }
    /// Bytes received so far (each is written back).
    uint64_t bytes() const noexcept { return _bytes; }
    /// Connections that ended with an error (peer reset, aborted by stop()...).
    uint64_t errors() const noexcept { return _errors; }
    /// Connections `stop()` aborted because they had not finished in time.
    uint64_t aborted() const noexcept { return _conns.aborted(); }

private:
    future<> serve(net::connected_socket s);

    net::transport _t;
    steady_clock_type::duration _shutdown_timeout;
    net::server_socket _ss;
    net::server_connections _conns;
    uint64_t _bytes = 0;
    uint64_t _errors = 0;
};

} // namespace shoal::echo
