#pragma once

#include "core/future.hh"
#include "net/message.hh"
#include "net/rdma/connection.hh"
#include "net/socket_address.hh"

#include <cstdint>
#include <vector>

namespace shoal::net::rdma {

/// The hello a `peer` sends as the first message on each of its one-sided connections, so a
/// server tells them from the control connection (whose first message is the application's).
struct peer_hello {
    /// "SHPEERDC": a one-sided (data) connection of a peer.
    static constexpr uint64_t magic = 0x4344524545504853ULL;
    uint64_t tag = magic;
    /// Index of the connection within its peer (0 .. data connections - 1).
    uint64_t index = 0;
};

/// Connections to one server in two groups (seed 003): one control connection carrying
/// messages (`messages()`: requests, RPC-style traffic) and a pool of RC connections for
/// one-sided work (`one_sided()`), so bulk READs and WRITEs never queue behind small messages
/// and small messages never wait behind bulk transfers (each RC connection has its own send
/// queue, issued in order). Move-only; used on the shard that connected it.
class peer {
public:
    /// Not connected.
    peer() noexcept = default;
    peer(peer&&) noexcept = default;
    peer& operator=(peer&&) noexcept = default;

    /// Connects the control connection and then `data_connections` (1 or more; otherwise
    /// std::invalid_argument) one-sided connections to `addr`, each announced by a
    /// `peer_hello` message. Fails with the first connection error (nothing is kept then).
    static future<peer> connect(const net::socket_address& addr, unsigned data_connections,
                                const connection_options& opts);
    /// `connect` with the options given to rdma::start.
    static future<peer> connect(const net::socket_address& addr, unsigned data_connections = 2);

    /// The message connection of the control group.
    net::message_connection& messages() noexcept { return _messages; }
    /// The control connection itself (its stats; one-sided work belongs on `one_sided()`).
    const connection& control() const noexcept { return _control; }
    /// The next usable one-sided connection, round robin; the last one tried when none is
    /// usable (its operations then fail with its error).
    connection& one_sided() noexcept;
    /// One-sided connection `i` (0 .. `data_connections()` - 1).
    connection& one_sided(unsigned i) noexcept { return _data[i]; }
    /// Connections in the one-sided group.
    unsigned data_connections() const noexcept { return unsigned(_data.size()); }
    /// Closes every connection of both groups.
    void close() noexcept;
    /// True when connected (usable or not).
    explicit operator bool() const noexcept { return bool(_control); }

private:
    connection _control;
    net::message_connection _messages;
    std::vector<connection> _data;
    std::vector<net::message_connection> _data_messages; // the hellos; kept for the connections' life
    unsigned _next = 0;
};

} // namespace shoal::net::rdma
