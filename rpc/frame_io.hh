#pragma once

// Frames on a stream: reading one (header, payload, attachments) and a writer that queues
// outgoing frames, writes them back to back and flushes once per batch, so that calls or replies
// ready in the same reactor iteration leave in one transport send.

#include "core/future.hh"
#include "net/stream.hh"
#include "rpc/serialize.hh"
#include "rpc/wire.hh"

#include <cstddef>
#include <deque>
#include <exception>
#include <optional>
#include <vector>

namespace shoal::rpc {

/// A received frame. The payload and attachment buffers share the received memory.
struct frame {
    frame_header header;
    net::temporary_buffer payload;
    net::temporary_buffer attachments;
};

/// A frame to send: header and payload in one buffer (the header is encoded when the frame is
/// written, so ids can still be set), then the attachments as they were given.
struct outgoing_frame {
    frame_header header;
    net::temporary_buffer head; // frame_header::size bytes of room, then the payload
    attachment_list attachments;

    /// Bytes this frame puts on the wire.
    size_t wire_size() const noexcept { return head.size() + header.attachment_size; }
};

/// Builds a frame of type `type` whose payload is `values...` serialized in order. Throws
/// protocol_error if payload or attachments exceed 4 GB.
template <typename... T>
outgoing_frame make_frame(frame_type type, const T&... values) {
    outgoing_frame f;
    f.header.type = type;
    size_t payload = (size_t(0) + ... + serialized_size(values));
    if (payload > UINT32_MAX) {
        throw protocol_error("payload too large to send (over 4 GB)");
    }
    f.head = net::temporary_buffer(frame_header::size + payload);
    writer w(f.head.get_write() + frame_header::size, &f.attachments);
    (serialize(w, values), ...);
    size_t att = 0;
    for (const auto& b : f.attachments) {
        att += b.size();
    }
    if (att > UINT32_MAX) {
        throw protocol_error("attachments too large to send (over 4 GB)");
    }
    f.header.payload_size = uint32_t(payload);
    f.header.attachment_size = uint32_t(att);
    return f;
}

/// Reads the next frame. Resolves with nothing at a clean end of stream (between frames);
/// fails with protocol_error on a bad header or a frame over `max_frame` bytes of payload and
/// attachments, with net::unexpected_eof when the stream ends inside a frame.
future<std::optional<frame>> read_frame(net::input_stream& in, size_t max_frame);

/// Writes frames to one output stream in the order given, batching the flushes. Owned by one
/// connection; `close()` or `abort()` must run before it is destroyed.
class frame_writer {
public:
    /// Writes to `out`.
    explicit frame_writer(net::output_stream out)
        : _out(std::move(out)) {}
    frame_writer(const frame_writer&) = delete;
    frame_writer& operator=(const frame_writer&) = delete;

    /// Queues `f` (encoding its header) and starts writing if idle. Dropped when the writer has
    /// failed or is closed (see `failed()`).
    void send(outgoing_frame&& f);
    /// Bytes queued and not yet handed to the stream.
    size_t queued_bytes() const noexcept { return _queued_bytes; }
    /// Resolves once fewer than `limit` bytes are queued (or the writer failed).
    future<> wait_below(size_t limit);
    /// Why writing stopped (null while healthy).
    std::exception_ptr failed() const noexcept { return _error; }
    /// Resolves when everything queued is written and flushed, then closes the stream.
    future<> close();
    /// Drops what is queued; later sends are dropped. Use after aborting the socket.
    void abort(std::exception_ptr why) noexcept;

private:
    future<> run();
    void wake() noexcept;

    net::output_stream _out;
    std::deque<outgoing_frame> _queue;
    size_t _queued_bytes = 0;
    size_t _wait_limit = 0;
    bool _running = false;
    bool _closed = false;
    std::exception_ptr _error;
    std::optional<promise<>> _below; // wait_below's waiter
    std::optional<promise<>> _idle;  // close()'s waiter for the run loop
};

} // namespace shoal::rpc
