#pragma once

// TCP for shards, on the reactor's io_uring: listening sockets with multishot accept,
// connections that receive with one recv at a time into a per-shard ring of provided buffers
// (handed to readers without a copy) and send with one vectored send in flight per socket.
// Everything here is used on the shard that created it. See docs/tcp.md.

#include "core/abort_source.hh"
#include "core/future.hh"
#include "net/socket_address.hh"
#include "net/stream.hh"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace shoal::net::tcp {

/// Options of an outgoing connection.
struct connect_options {
    /// Give up after this long (the future fails with ETIMEDOUT); zero: the kernel's own
    /// timeout (about two minutes of SYN retries).
    std::chrono::milliseconds timeout{0};
    /// Bind the socket to this local address first (port 0: any port).
    std::optional<socket_address> local;
};

/// Starts listening on `addr` (port 0 picks a free port; see `server_socket::local_address`).
/// With `opts.reuse_port` every shard may listen on the same address and the kernel spreads
/// new connections across them. Throws std::system_error naming the address (for example
/// "listen 127.0.0.1:80: Address already in use"). Out of file descriptors or memory, the
/// listener backs off and keeps accepting (accept() does not fail); with `opts.refusal` it
/// answers the connections it has no descriptor for with that message and closes them.
server_socket listen(const socket_address& addr, const listen_options& opts = {});

/// Connects to `addr`. Refused, unreachable and timed-out connections fail the future with a
/// std::system_error carrying the errno and the address ("connect 127.0.0.1:1: Connection
/// refused").
future<connected_socket> connect(const socket_address& addr, const connect_options& opts = {});

/// `connect` that `as` can cancel: aborting it fails the future at once with the abort's reason
/// (`abort_requested_exception` by default) and cancels the request; the socket is closed once
/// the kernel is done with it (also if it connected meanwhile). Fails at once, without making a
/// socket, if `as` was already aborted.
future<connected_socket> connect(const socket_address& addr, const connect_options& opts, abort_source& as);

/// Tuning of the TCP stack, process-wide. Set it before the first TCP socket of a shard is
/// used: each shard reads it when it sets up its receive buffer ring.
struct config {
    /// Buffers in each shard's provided-buffer ring (a power of two, at most 32768).
    unsigned recv_buffers = 1024;
    /// Size of each receive buffer: the most one receive completion carries.
    size_t recv_buffer_size = 32 * 1024;
    /// Buffers kept in the kernel's ring, however many receives are armed (twice as many, up to
    /// the pool, after receives found it empty). The rest of the pool waits on a free list,
    /// cold and not resident, so the shard's working set stays small.
    unsigned ring_depth = 32;
    /// When fewer than this many buffers are left in the ring, received bytes are copied into
    /// heap memory and the ring buffer is returned at once, so readers that keep buffers cannot
    /// starve the shard's other connections. 0: recv_buffers / 4.
    unsigned copy_below = 0;
    /// Unread bytes a connection queues before it stops receiving (the kernel's socket buffer
    /// and TCP flow control take over until the reader catches up).
    size_t max_unread = 512 * 1024;
    /// Bytes a connection's output may queue before `put` waits for the kernel to take them.
    size_t send_window = 1024 * 1024;
    /// TCP_NODELAY on new connections (output streams already gather small writes).
    bool nodelay = true;
};

/// Replaces the process-wide TCP configuration (see `config`).
void set_config(const config& cfg);
/// The process-wide TCP configuration.
config get_config();

/// Counters of the calling shard's TCP stack.
struct stats {
    uint64_t accepted = 0;            ///< connections accepted
    uint64_t accept_errors = 0;       ///< accepts that failed for want of descriptors or memory
    uint64_t refused_connections = 0; ///< connections answered with the refusal and closed
    uint64_t connected = 0;           ///< outgoing connections established
    uint64_t recv_completions = 0;    ///< receive completions carrying data
    uint64_t recv_bytes = 0;          ///< bytes received
    uint64_t recv_arms = 0;           ///< receives submitted (each completes once)
    uint64_t zero_copy_buffers = 0;   ///< received buffers handed to readers without a copy
    uint64_t copied_buffers = 0;      ///< received buffers copied because the ring ran low
    uint64_t buffer_shortages = 0;    ///< receives stopped by an empty ring (ENOBUFS)
    uint64_t recv_paused = 0;         ///< receives stopped because the reader fell behind
    uint64_t sends = 0;               ///< send requests submitted
    uint64_t vectored_sends = 0;      ///< of which carried several buffers (sendmsg)
    uint64_t send_bytes = 0;          ///< bytes sent
    uint64_t short_sends = 0;         ///< sends the kernel completed only partly
    uint64_t aborts = 0;              ///< connections broken by connected_socket::abort()
};

/// The calling shard's TCP counters.
const stats& shard_stats() noexcept;

} // namespace shoal::net::tcp
