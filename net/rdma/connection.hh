#pragma once

#include "core/abort_source.hh"
#include "core/future.hh"
#include "net/message.hh"
#include "net/rdma/connection_stats.hh"
#include "net/rdma/immediates.hh"
#include "net/rdma/memory_region.hh"
#include "net/rdma/op_completion.hh"
#include "net/rdma/options.hh"
#include "net/socket_address.hh"
#include "net/stream.hh"

#include <cstdint>
#include <memory>
#include <optional>

struct ibv_mr;

namespace shoal::net::rdma {

class memory_window;

namespace internal {
class acceptor;
class connection_impl;
class connection_ref;
} // namespace internal

/// An RDMA reliable connection on the calling shard: one-sided operations (each a future
/// resolved by its completion; several issued in one task are posted as one list), the stream
/// of WRITE_WITH_IMM immediates the peer sends, and the stream transport (`socket()`).
/// Copies share the connection; dropping the last copy (and every stream taken from it)
/// closes it. Errors on it (peer gone, remote access error) fail its pending and later
/// operations and close it; other connections are unaffected.
class connection {
public:
    /// No connection (false).
    connection() noexcept = default;
    /// Wraps a hold on a connection.
    explicit connection(std::shared_ptr<internal::connection_ref> ref) noexcept
        : _ref(std::move(ref)) {}

    /// RDMA READ of `dst.length` bytes at `offset` of `src` into `dst`.
    future<> read(local_span dst, const remote_region& src, uint64_t offset = 0);
    /// RDMA WRITE of `src` to `offset` of `dst`.
    future<> write(local_span src, const remote_region& dst, uint64_t offset = 0);
    /// RDMA WRITE_WITH_IMM: writes, then the peer receives `imm` (after the data is visible).
    /// Uses one of the peer's receive credits.
    future<> write_with_imm(local_span src, const remote_region& dst, uint64_t offset, uint32_t imm);
    /// `read` whose outcome goes to `done` (see `op_completion`) instead of a future: the
    /// completion calls it directly. `done` must live until it is called.
    void read(local_span dst, const remote_region& src, uint64_t offset, op_completion& done) noexcept;
    /// `write` whose outcome goes to `done` (see the `read` that takes one).
    void write(local_span src, const remote_region& dst, uint64_t offset, op_completion& done) noexcept;
    /// Atomic fetch-and-add on the 8-byte word at `offset` of `dst`; yields the previous value.
    future<uint64_t> fetch_add(const remote_region& dst, uint64_t offset, uint64_t add);
    /// Atomic compare-and-swap on the 8-byte word at `offset`; yields the previous value (the
    /// swap happened when it equals `expected`).
    future<uint64_t> compare_swap(const remote_region& dst, uint64_t offset, uint64_t expected,
                                  uint64_t desired);
    /// The operations above, cancellable: when `as` aborts, the returned future fails at once
    /// with the abort's reason (`timed_out_error` under `with_timeout(deadline, func)`), and an
    /// operation still queued behind others is never posted. One already posted cannot be taken
    /// back: it still runs, and its span holds its pool memory until the device completes it.
    future<> read(local_span dst, const remote_region& src, uint64_t offset, abort_source& as);
    /// Cancellable `write` (see the cancellable `read`).
    future<> write(local_span src, const remote_region& dst, uint64_t offset, abort_source& as);
    /// Cancellable `write_with_imm` (see the cancellable `read`).
    future<> write_with_imm(local_span src, const remote_region& dst, uint64_t offset, uint32_t imm,
                            abort_source& as);
    /// Cancellable `fetch_add` (see the cancellable `read`).
    future<uint64_t> fetch_add(const remote_region& dst, uint64_t offset, uint64_t add, abort_source& as);
    /// Cancellable `compare_swap` (see the cancellable `read`).
    future<uint64_t> compare_swap(const remote_region& dst, uint64_t offset, uint64_t expected,
                                  uint64_t desired, abort_source& as);
    /// The next immediate value a WRITE_WITH_IMM from the peer delivered (in order). Fails
    /// with std::logic_error once a channel of tagged immediates is open.
    future<uint32_t> next_immediate();
    /// Opens the channel of immediates tagged `tag` (0-15), so several users share this
    /// connection's WRITE_WITH_IMM events (see `immediate_channel`). Throws
    /// std::invalid_argument for a bad tag, std::logic_error when it is open already.
    immediate_channel immediates(unsigned tag);

    /// The region the peer offered in its connect/accept private data, if any.
    const std::optional<remote_region>& peer_region() const noexcept;
    /// The stream transport over this connection (take it once; not with `messages()`).
    net::connected_socket socket();
    /// The message API over this connection (take it once; not with `socket()`): each message
    /// is one SEND of at most the peer's receive size (no splitting), received as one buffer.
    net::message_connection messages();

    /// Binds the unbound type-2 window `w` (of this shard: `allocate_window`) to `len` bytes at
    /// `addr` of registration `mr` (registered with `access::mw_bind`) on this connection's QP,
    /// with the remote rights `a`: a BIND_MW work request under a new rkey. Resolves, once the
    /// bind completed, with the region the peer uses; only this connection's peer can use it
    /// (the rkey is refused on any other QP). A failed bind fails the future and the connection
    /// (like any failed work request); the window is then deallocated when dropped.
    future<remote_region> bind_window(memory_window& w, const ibv_mr* mr, const char* addr, size_t len,
                                      access a);
    /// `bind_window` over `len` bytes at `offset` of `mr`.
    future<remote_region> bind_window(memory_window& w, const memory_region& mr, size_t offset, size_t len,
                                      access a) {
        return bind_window(w, mr.mr(), mr.data() + offset, len, a);
    }
    /// Invalidates window `w`, bound on this connection (LOCAL_INV of its rkey on the same QP):
    /// resolves once it completed; from then on the rkey fails with a remote access error and
    /// the window goes back to the shard's free list when dropped. Operations of the peer that
    /// the device executed before the invalidate may still have completed.
    future<> invalidate_window(memory_window& w);

    /// This side's address.
    net::socket_address local_address() const noexcept;
    /// The peer's address.
    net::socket_address peer_address() const noexcept;
    /// Counters of this connection.
    const connection_stats& stats() const noexcept;
    /// Size of the peer's receive buffers (the largest message this side may send).
    uint32_t peer_recv_buffer_size() const noexcept;
    /// False once the connection is closed or broken.
    bool usable() const noexcept;
    /// Why it is closed or broken (null while usable).
    std::exception_ptr error() const noexcept;
    /// Closes it now (pending operations fail).
    void close();
    /// True when it refers to a connection (usable or not).
    explicit operator bool() const noexcept { return bool(_ref); }

private:
    internal::connection_impl& impl() const noexcept;
    std::shared_ptr<internal::connection_ref> _ref;
};

/// Options of `listen_rc` / `listen`.
struct listen_options {
    /// Per-connection settings of accepted connections (default: rdma::start's).
    std::optional<connection_options> connection;
    /// Connect requests rdma_cm queues.
    int backlog = 1024;
    /// Connections a shard holds for `accept()` (being set up or established, not yet taken);
    /// beyond it connect requests are rejected with "accept backlog of N full on shard S".
    unsigned accept_backlog = 256;
};

/// A listening endpoint on the calling shard. When several shards listen on the same address,
/// incoming connections are spread over them (each accepted on its shard's resources).
class listener {
public:
    /// Not listening.
    listener() noexcept;
    /// Wraps this shard's membership in a listening address.
    explicit listener(std::unique_ptr<internal::acceptor> a) noexcept;
    listener(listener&&) noexcept;
    listener& operator=(listener&&) noexcept;
    ~listener();

    /// The next connection established on this shard.
    future<connection> accept();
    /// `accept()`, failing at once with `as`'s reason when it aborts first (still listening).
    future<connection> accept(abort_source& as);
    /// Fails a pending accept and stops listening on this shard.
    void abort_accept();
    /// The address listened on (with the port rdma_cm picked when 0 was asked for).
    net::socket_address local_address() const;

private:
    std::unique_ptr<internal::acceptor> _a;
};

/// Listens on `addr` (the RDMA device's address; port 0 picks one) from the calling shard.
/// Throws connection_error (address in use, not an RDMA address) or rdma_error (not started).
listener listen_rc(const net::socket_address& addr, const listen_options& opts = {});
/// Connects to `addr` from the calling shard. Fails with connection_error: rejected (no
/// listener), unreachable, address/route resolution failed or timed out, setup timed out.
future<connection> connect_rc(const net::socket_address& addr, const connection_options& opts);
/// `connect_rc` with the options given to rdma::start.
future<connection> connect_rc(const net::socket_address& addr);
/// `connect_rc`, cancelled by `as`: an abort before the connection is established fails it at
/// once with the abort's reason (`timed_out_error` under `with_timeout(deadline, func)`) and
/// frees what the setup had made.
future<connection> connect_rc(const net::socket_address& addr, const connection_options& opts,
                              abort_source& as);

/// The stream transport, shaped like TCP's: a server socket whose accepted connections are
/// RDMA streams on the calling shard.
net::server_socket listen(const net::socket_address& addr, const listen_options& opts = {});
/// The stream transport: connects and yields a connected_socket (SEND/RECV with credits).
future<net::connected_socket> connect(const net::socket_address& addr, const connection_options& opts);
/// `connect` with the options given to rdma::start.
future<net::connected_socket> connect(const net::socket_address& addr);
/// `connect` cancelled by `as` (see the abortable `connect_rc`).
future<net::connected_socket> connect(const net::socket_address& addr, const connection_options& opts,
                                      abort_source& as);

} // namespace shoal::net::rdma
