#pragma once

// Messages with boundaries over a connection: `send` of one message made of several buffers,
// `receive` of one message. For message-based protocols (RPC, KV control) rather than byte
// streams. Over RDMA a message is one SEND (rdma::connection::messages()); over any byte stream
// (TCP) it is a length-prefixed frame (framed_messages()). See docs/net.md.

#include "core/future.hh"
#include "net/socket_address.hh"
#include "net/stream.hh"
#include "net/temporary_buffer.hh"

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>

namespace shoal::net {

/// Takes received messages by call instead of by future (`message_connection::receive_into`).
class message_receiver {
public:
    /// The next message, or nullopt once the peer ended its side.
    virtual void on_message(std::optional<temporary_buffer> message) noexcept = 0;
    /// Receiving failed (a broken or aborted connection).
    virtual void on_receive_error(std::exception_ptr error) noexcept = 0;

protected:
    ~message_receiver() = default;
};

/// The transport side of a message connection; see `message_connection`.
class message_connection_impl {
public:
    virtual ~message_connection_impl() = default;
    /// Sends the buffers, in order, as one message (1 to `max_message_size()` bytes); the
    /// buffers are moved out of `parts` before this returns. Resolves when the transport has
    /// taken the message (not necessarily delivered); waits while too much is queued.
    virtual future<> send(std::span<temporary_buffer> parts) = 0;
    /// The next message, whole and contiguous; nullopt once the peer ended its side.
    virtual future<std::optional<temporary_buffer>> receive() = 0;
    /// `receive()` whose result goes to `r`; true when `r` was called before this returned.
    /// This default waits on `receive()`'s future; a transport that can hands the message over
    /// from its receive completion instead (RDMA), with no task in between.
    virtual bool receive_into(message_receiver& r);
    /// The largest message `send` takes.
    virtual size_t max_message_size() const noexcept = 0;
    /// Ends sending after the queued messages (the peer receives nullopt after the last one).
    virtual future<> close() = 0;
    /// Breaks the connection now (see `connected_socket::abort`).
    virtual void abort() noexcept = 0;
    /// The other end's address.
    virtual socket_address peer_address() const = 0;
};

/// A connection that keeps message boundaries. One sender and one receiver at a time (wait for
/// each future before the next call of the same kind). A message that is empty or larger than
/// `max_message_size()` fails its `send` at once with `std::invalid_argument` and nothing is
/// sent; the connection stays usable.
class message_connection {
public:
    /// No connection (false).
    message_connection() = default;
    /// Wraps a transport's message connection.
    explicit message_connection(std::unique_ptr<message_connection_impl> impl) noexcept
        : _impl(std::move(impl)) {}

    /// Sends the buffers of `parts` as one message (e.g. a header and a payload), without
    /// copying them where the transport can (RDMA: one SEND with one scatter-gather entry per
    /// registered part; TCP: one sendmsg). The buffers are moved out before this returns.
    future<> send(std::span<temporary_buffer> parts) { return _impl->send(parts); }
    /// Sends one message made of `first` and then `rest`.
    template <typename... More>
    future<> send(temporary_buffer first, More... rest) {
        std::array<temporary_buffer, 1 + sizeof...(More)> parts{std::move(first), std::move(rest)...};
        return _impl->send(std::span<temporary_buffer>(parts));
    }
    /// The next message; nullopt once the peer closed its side.
    future<std::optional<temporary_buffer>> receive() { return _impl->receive(); }
    /// Like `receive()`, but the message (or the error) is handed to `r`: at once when one is
    /// already there (then this returns true), else when it arrives, from the transport's
    /// receive completion where it has one (RDMA: no task, no future). Counts as the one
    /// pending receive. `r` must stay alive until it is called or this connection is destroyed,
    /// and must not destroy the connection from inside the call.
    bool receive_into(message_receiver& r) { return _impl->receive_into(r); }
    /// The largest message this side may send.
    size_t max_message_size() const noexcept { return _impl->max_message_size(); }
    /// Ends sending after the queued messages; resolves when they left.
    future<> close() { return _impl->close(); }
    /// Breaks the connection now: pending and later sends and receives fail.
    void abort() noexcept { _impl->abort(); }
    /// The other end's address.
    socket_address peer_address() const { return _impl->peer_address(); }
    /// True when it holds a connection.
    explicit operator bool() const noexcept { return bool(_impl); }

private:
    std::unique_ptr<message_connection_impl> _impl;
};

namespace internal {
/// The size of a message about to be sent; throws `std::invalid_argument` when it is empty or
/// larger than `max` (nothing is sent then).
size_t checked_message_size(std::span<temporary_buffer> parts, size_t max);
} // namespace internal

/// The default largest message of `framed_messages` (64 MiB).
inline constexpr size_t default_max_frame = size_t(64) << 20;

/// Messages over a byte stream (TCP, or an RDMA stream): each message is a 4-byte
/// little-endian length and then its bytes. A received frame longer than `max_message_size`
/// fails `receive` with `std::runtime_error` naming both sizes (the stream cannot be resynced:
/// the connection is aborted); a stream ending inside a frame fails with `unexpected_eof`.
message_connection framed_messages(connected_socket s, size_t max_message_size = default_max_frame);

} // namespace shoal::net
