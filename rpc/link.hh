#pragma once

// The transport side of one RPC connection: frames in, frames out. Over a byte stream (TCP, or
// an RDMA stream) frames are written back to back (`stream_link`); over RDMA a connection's
// message API carries one frame per SEND and large bodies travel by one-sided READ
// (`rdma_link`, rpc/rdma_link.hh). Client and server are written against this interface.

#include "core/future.hh"
#include "net/socket_address.hh"
#include "net/stream.hh"
#include "rpc/frame_io.hh"

#include <cstddef>
#include <exception>
#include <memory>
#include <optional>

namespace shoal::rpc {

/// Takes a link's frames as they complete (`link::read_frames_into`), instead of a reader
/// that asks for each one.
class frame_sink {
public:
    /// A complete frame. A throw (e.g. protocol_error for a frame of the wrong type) ends
    /// reading: `on_end` follows with that error.
    virtual void on_frame(frame&& f) = 0;
    /// Reading ended, once, and no frame follows: `why` is null at a clean end (or after
    /// `shutdown_input`), else the error (protocol_error on a malformed or oversized frame, or
    /// the transport's). May run inside the link's own work: do not abort or destroy the link
    /// from here, hand that to a task.
    virtual void on_end(std::exception_ptr why) noexcept = 0;

protected:
    ~frame_sink() = default;
};

/// One RPC connection's frames. One reader at a time (wait for each `read_frame` before the
/// next, or hand every frame to a sink); `send` may be called any time and never blocks (use
/// `wait_below` for back-pressure).
class link {
public:
    virtual ~link() = default;
    /// The next frame; nullopt at a clean end (or after `shutdown_input`). Fails with
    /// protocol_error on a malformed or oversized frame, or with the transport's error.
    virtual future<std::optional<frame>> read_frame(size_t max_frame) = 0;
    /// From now on hands every frame to `sink` as it completes, up to its `on_end`; no
    /// `read_frame` after this. Over RDMA the receive completion hands the frame over (no
    /// future, no task); the default reads with `read_frame` in a loop. The link and `sink`
    /// must live until `on_end` has been called.
    virtual void read_frames_into(frame_sink& sink, size_t max_frame);
    /// With a sink: hands it no frame until `resume_reading()` (back-pressure). Frames that
    /// complete meanwhile wait in the link, which takes no more from the transport; the end of
    /// reading after an error or `shutdown_input()` still reaches the sink at once, a clean end
    /// once the waiting frames were handed over.
    virtual void pause_reading() noexcept;
    /// Hands the sink the frames that waited, then reads on.
    virtual void resume_reading() noexcept;
    /// Queues `f` (its header complete but for the encoding) and starts sending; dropped once
    /// the link failed or is closed.
    virtual void send(outgoing_frame&& f) = 0;
    /// Bytes of frames queued, or sent but still held for the peer (RDMA READ of a body).
    virtual size_t queued_bytes() const noexcept = 0;
    /// Resolves once fewer than `limit` bytes are queued or held (or the link failed).
    virtual future<> wait_below(size_t limit) = 0;
    /// Why sending stopped (null while healthy).
    virtual std::exception_ptr failed() const noexcept = 0;
    /// Resolves when everything queued is sent, then ends this side's output.
    virtual future<> close() = 0;
    /// Drops what is queued (and what is held for the peer); later sends are dropped.
    virtual void abort_output(std::exception_ptr why) noexcept = 0;
    /// Breaks the connection now: pending reads and sends fail.
    virtual void abort() noexcept = 0;
    /// No more frames are read: a pending and every later `read_frame` resolves with nullopt.
    virtual void shutdown_input() noexcept = 0;
    /// Sets TCP_NODELAY where the transport has it.
    virtual void set_nodelay() = 0;
    /// The other end's address.
    virtual net::socket_address peer_address() const = 0;

private:
    /// The default `read_frames_into`: a loop over `read_frame` that waits while paused.
    static future<> read_frames_loop(link& l, frame_sink& sink, size_t max_frame);

    bool _reading_paused = false;              // (default sink loop) paused
    std::optional<promise<>> _reading_resumed; // (default sink loop) its wait for `resume`
};

/// Frames on a byte stream: read with `read_frame`, written by a `frame_writer` that flushes
/// once per batch. Refuses frames with RDMA-only flags (protocol_error).
std::unique_ptr<link> stream_link(net::connected_socket s);

} // namespace shoal::rpc
