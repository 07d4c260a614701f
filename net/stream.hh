#pragma once

#include "core/abort_source.hh"
#include "core/future.hh"
#include "net/socket_address.hh"
#include "net/temporary_buffer.hh"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace shoal::net {

/// Thrown by `read_exactly` when the stream ends before the requested bytes arrived.
class unexpected_eof : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Where an input stream's bytes come from: a TCP socket, an RDMA stream connection, a test.
/// The transport implements this; users see `input_stream`.
class data_source_impl {
public:
    virtual ~data_source_impl() = default;
    /// Resolves with the next bytes that arrived (any size), or an empty buffer at the end of
    /// the stream. Called again only after the previous call resolved.
    virtual future<temporary_buffer> get() = 0;
    /// Like `get()`, but when `as` is aborted while it waits the future fails at once with the
    /// abort's reason and the source stays usable: bytes that arrive later go to the next read.
    /// Fails at once if `as` was already aborted. The default refuses (std::logic_error naming
    /// the missing support); transports that can cancel a read override it (TCP and RDMA do).
    virtual future<temporary_buffer> get(abort_source& as);
    /// Stops reading; a pending `get()` resolves (empty) or fails.
    virtual future<> close() { return make_ready_future<>(); }
    /// True once `get()` has produced the end of the stream (implementations set `_eof`).
    bool eof() const noexcept { return _eof; }

protected:
    bool _eof = false;
};

/// Bytes the stream layer copied on the calling thread (output gathering, `read_exactly` joining
/// buffers), counted so that tests can assert how many copies a message costs.
struct copy_stats {
    uint64_t copies = 0; ///< memcpy calls
    uint64_t bytes = 0;  ///< bytes they copied
};

/// The calling thread's copy counters.
const copy_stats& stream_copies() noexcept;

namespace internal {
/// The counters behind `stream_copies()`.
extern thread_local copy_stats tl_stream_copies;
/// Counts one copy of `n` bytes.
inline void count_copy(size_t n) noexcept {
    ++tl_stream_copies.copies;
    tl_stream_copies.bytes += n;
}
} // namespace internal

/// Where an output stream's bytes go. `put` may keep the buffer until the bytes are sent.
class data_sink_impl {
public:
    virtual ~data_sink_impl() = default;
    /// Queues `buf` for sending; resolves when the sink can take more (not necessarily sent).
    virtual future<> put(temporary_buffer buf) = 0;
    /// Queues several buffers, in order, as if put one after the other; a transport that can
    /// send them in one operation (TCP: one sendmsg) does so. The sink moves the buffers out of
    /// `bufs` before returning (the span need not outlive the call). The default puts them one
    /// at a time.
    virtual future<> put_many(std::span<temporary_buffer> bufs);
    /// Memory of `size` bytes that `output_stream` gathers writes into and then hands to `put`
    /// (whole or in slices), so a transport can have them written straight into memory it
    /// sends from. The default allocates on the heap.
    virtual temporary_buffer allocate_buffer(size_t size) { return temporary_buffer(size); }
    /// Resolves when everything put so far has been handed to the transport.
    virtual future<> flush() { return make_ready_future<>(); }
    /// Flushes and ends the stream (the peer reads end-of-stream).
    virtual future<> close() = 0;
    /// How many bytes the output stream should gather before calling `put` (0: no preference).
    virtual size_t buffer_size_hint() const noexcept { return 0; }
    /// True when `output_stream::flush` drops the rest of its gathering buffer (the next write
    /// allocates a new one): for memory that is scarce while idle, such as RDMA pool memory, or
    /// that idle connections should not hold, such as TCP's gathering blocks.
    bool release_buffer_when_flushed() const noexcept { return _release_when_flushed; }

protected:
    bool _release_when_flushed = false;
};

/// Reads a byte stream as buffers. Not copyable; one reader at a time (wait for a read to
/// resolve before the next).
class input_stream {
public:
    /// A stream without a source: reads return end of stream.
    input_stream() = default;
    /// Reads from `source`.
    explicit input_stream(std::unique_ptr<data_source_impl> source) noexcept
        : _source(std::move(source)) {}

    /// Whatever arrived next (held-back bytes first); empty at end of stream.
    future<temporary_buffer> read();
    /// `read()` that `as` can cancel: aborting it fails the future at once with the abort's
    /// reason (`abort_requested_exception` by default) and loses no bytes; the stream stays
    /// readable. An already-aborted `as` fails the read without consuming anything. Needs a
    /// transport that supports it (`data_source_impl::get(abort_source&)`; TCP and RDMA do).
    future<temporary_buffer> read(abort_source& as);
    /// At most `n` bytes.
    future<temporary_buffer> read_up_to(size_t n);
    /// `read_up_to` that `as` can cancel (as `read(abort_source&)`).
    future<temporary_buffer> read_up_to(size_t n, abort_source& as);
    /// Exactly `n` bytes; fails with `unexpected_eof` if the stream ends first. Contiguous: when
    /// the bytes span several received buffers they are copied into one.
    future<temporary_buffer> read_exactly(size_t n);
    /// `read_exactly` that `as` can cancel: aborted part-way, the bytes already gathered are
    /// put back in front of the stream (the next read returns them) and the future fails with
    /// the abort's reason at the next task (wait for it before reading again).
    future<temporary_buffer> read_exactly(size_t n, abort_source& as);
    /// True once a read has seen the end of the stream.
    bool eof() const noexcept { return !_held && (!_source || _source->eof()); }
    /// Puts bytes back in front of the stream (for parsers that read too far).
    void unread(temporary_buffer buf) noexcept { _held = std::move(buf); }
    /// Closes the source.
    future<> close();

private:
    future<temporary_buffer> read_exactly_from(size_t n, abort_source* as);
    future<temporary_buffer> read_up_to_from(size_t n, abort_source* as);
    future<temporary_buffer> read_maybe_abortable(abort_source* as) { return as ? read(*as) : read(); }
    std::unique_ptr<data_source_impl> _source;
    temporary_buffer _held;
};

/// Writes a byte stream. Small writes are gathered (one copy) into buffers the sink allocates
/// (`data_sink_impl::allocate_buffer`), of its preferred size; on `flush` or when full the
/// gathered bytes go to the sink as a slice of that buffer (no further copy) and gathering goes
/// on in the rest of it. Large writes pass through without a copy when given as
/// `temporary_buffer`. One writer at a time: wait for each future before the next call.
class output_stream {
public:
    /// A placeholder without a sink; assign a real stream before writing to it.
    output_stream() = default;
    /// Writes to `sink`, gathering up to `buffer_size` bytes (0: the sink's hint, else 8192).
    explicit output_stream(std::unique_ptr<data_sink_impl> sink, size_t buffer_size = 0);

    /// Copies `bytes` into the stream.
    future<> write(std::string_view bytes);
    /// Same as `write(std::string_view(data, size))`.
    future<> write(const char* data, size_t size) { return write(std::string_view(data, size)); }
    /// Hands `buf` over (no copy when it is large; small buffers are gathered).
    future<> write(temporary_buffer buf);
    /// Hands every buffer of `bufs` over as it is, in order after what was gathered, without a
    /// copy and in one `put_many` together with the gathered bytes (over TCP a header and a
    /// payload leave in one sendmsg, over RDMA in one SEND). The buffers are moved out of
    /// `bufs` before this returns.
    future<> write(std::span<temporary_buffer> bufs);
    /// Sends what is gathered and waits until the transport has taken it. With a sink that asks
    /// for it (`data_sink_impl::release_buffer_when_flushed`: RDMA) the stream then holds no
    /// gathering memory until the next write.
    future<> flush();
    /// Flushes and ends the stream.
    future<> close();

private:
    /// The gathered bytes as a slice of the gathering buffer (gathering goes on behind it).
    temporary_buffer take_gathered() noexcept;
    future<> put_gathered();
    std::unique_ptr<data_sink_impl> _sink;
    size_t _buffer_size = 8192;
    // The part of the current gathering buffer not handed over yet: `_used` gathered bytes at its
    // front, then room. Slices already handed over stay in the sink's hands.
    temporary_buffer _buf;
    size_t _used = 0;
};

/// The transport side of a connection; see `connected_socket`.
class connected_socket_impl {
public:
    virtual ~connected_socket_impl() = default;
    /// The receiving side (taken once).
    virtual std::unique_ptr<data_source_impl> source() = 0;
    /// The sending side (taken once).
    virtual std::unique_ptr<data_sink_impl> sink() = 0;
    /// Ends receiving; see `connected_socket::shutdown_input`.
    virtual void shutdown_input() = 0;
    /// Ends sending; see `connected_socket::shutdown_output`.
    virtual void shutdown_output() = 0;
    /// Sets the no-delay option (TCP_NODELAY or the transport's equivalent).
    virtual void set_nodelay(bool on) = 0;
    /// The no-delay option.
    virtual bool get_nodelay() const = 0;
    /// Sets the keep-alive option (SO_KEEPALIVE or the transport's equivalent).
    virtual void set_keepalive(bool on) = 0;
    /// The keep-alive option.
    virtual bool get_keepalive() const = 0;
    /// This end's address.
    virtual socket_address local_address() const = 0;
    /// The other end's address.
    virtual socket_address peer_address() const = 0;
    /// Breaks the connection at once, whatever the peer does: pending and later reads and
    /// writes fail (or see end of stream), queued output is dropped, resources are released
    /// without waiting for the peer. Servers use it when a graceful drain missed its deadline.
    /// Transports override it; the default only shuts both directions down.
    virtual void abort() noexcept {
        try {
            shutdown_input();
            shutdown_output();
        } catch (...) {
        }
    }
};

/// A connected byte stream (TCP or RDMA). Each direction is taken once with `input()` and
/// `output()`. The connection lives while the socket or any stream taken from it lives.
class connected_socket {
public:
    /// No connection (false).
    connected_socket() = default;
    /// Wraps a transport's connection.
    explicit connected_socket(std::shared_ptr<connected_socket_impl> impl) noexcept
        : _impl(std::move(impl)) {}

    /// The receiving side.
    input_stream input();
    /// The sending side; `buffer_size` 0 takes the transport's preference.
    output_stream output(size_t buffer_size = 0);
    /// Ends receiving: pending and later reads see end of stream.
    void shutdown_input() { _impl->shutdown_input(); }
    /// Ends sending (the peer reads end of stream) without closing the input.
    void shutdown_output() { _impl->shutdown_output(); }
    /// Breaks the connection now: no drain, no waiting for the peer (see
    /// `connected_socket_impl::abort`).
    void abort() noexcept { _impl->abort(); }
    /// Turns TCP_NODELAY on or off (RDMA streams only record it: they never delay sends).
    void set_nodelay(bool on) { _impl->set_nodelay(on); }
    /// Whether no-delay is on.
    bool get_nodelay() const { return _impl->get_nodelay(); }
    /// Turns SO_KEEPALIVE on or off (RDMA streams only record it).
    void set_keepalive(bool on) { _impl->set_keepalive(on); }
    /// Whether keep-alive is on.
    bool get_keepalive() const { return _impl->get_keepalive(); }
    /// This end's address.
    socket_address local_address() const { return _impl->local_address(); }
    /// The other end's address.
    socket_address peer_address() const { return _impl->peer_address(); }
    /// True when it holds a connection.
    explicit operator bool() const noexcept { return bool(_impl); }

private:
    std::shared_ptr<connected_socket_impl> _impl;
};

/// One accepted connection and where it came from.
struct accept_result {
    connected_socket connection;
    socket_address remote_address;
};

/// The transport side of a listening socket.
class server_socket_impl {
public:
    virtual ~server_socket_impl() = default;
    /// Resolves with the next incoming connection.
    virtual future<accept_result> accept() = 0;
    /// Like `accept()`, but aborting `as` fails the pending accept at once with the abort's
    /// reason and keeps the listener usable. The default refuses (std::logic_error).
    virtual future<accept_result> accept(abort_source& as);
    /// Fails a pending accept and stops listening.
    virtual void abort_accept() = 0;
    /// The address listened on.
    virtual socket_address local_address() const = 0;
    /// Connections answered with `listen_options::refusal` and closed (none by default).
    virtual uint64_t refused_connections() const noexcept { return 0; }
};

/// A listening socket: `accept()` resolves with each incoming connection. `abort_accept()`
/// fails a pending accept and closes the listener.
class server_socket {
public:
    /// No listener (false).
    server_socket() = default;
    /// Wraps a transport's listener.
    explicit server_socket(std::unique_ptr<server_socket_impl> impl) noexcept
        : _impl(std::move(impl)) {}
    /// The next incoming connection; one accept at a time.
    future<accept_result> accept() { return _impl->accept(); }
    /// `accept()` that `as` can cancel: aborting it fails the accept at once with the abort's
    /// reason (`abort_requested_exception` by default); the listener keeps listening and a later
    /// accept gets connections that arrived meanwhile. Fails at once if `as` was already aborted.
    future<accept_result> accept(abort_source& as) { return _impl->accept(as); }
    /// Fails a pending accept and every later one, and stops listening.
    void abort_accept() { _impl->abort_accept(); }
    /// The address listened on (with the port picked when 0 was asked for).
    socket_address local_address() const { return _impl->local_address(); }
    /// Connections this listener answered with `listen_options::refusal` and closed because no
    /// descriptor was left for them (0 without a listener or a refusal).
    uint64_t refused_connections() const noexcept { return _impl ? _impl->refused_connections() : 0; }
    /// True when it holds a listener.
    explicit operator bool() const noexcept { return bool(_impl); }

private:
    std::unique_ptr<server_socket_impl> _impl;
};

/// Options for listening sockets.
struct listen_options {
    /// SO_REUSEPORT: every shard may listen on the same port and the kernel spreads
    /// connections across them.
    bool reuse_port = false;
    /// SO_REUSEADDR (on by default).
    bool reuse_address = true;
    /// Pending connections the kernel queues.
    int backlog = 1024;
    /// When not empty, the listener keeps one file descriptor in reserve: when accepting fails
    /// for want of descriptors (EMFILE, ENFILE) it frees it, accepts the connections waiting,
    /// writes these bytes to each and closes it, so clients are refused instead of left waiting
    /// in the backlog (memcached's "ERROR Too many open connections\r\n"). Empty: no reserve;
    /// waiting connections stay in the kernel's backlog until descriptors are free. TCP only.
    std::string refusal;
};

} // namespace shoal::net
