#pragma once

#include "core/abort_source.hh"
#include "core/future.hh"
#include "core/reactor.hh"
#include "core/task.hh"
#include "net/socket_address.hh"
#include "net/stream.hh"
#include "net/tcp/buffer_ring.hh"
#include "net/tcp/internal.hh"

#include <algorithm>
#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <span>

#include <sys/socket.h>
#include <sys/uio.h>

namespace shoal::net::tcp::internal {

class tcp_data_source;
/// The iovec array and msghdr of one vectored send, borrowed from the shard (connection.cc).
struct send_vector;

/// One TCP connection: the socket, its receive side (one recv at a time into the shard's buffer
/// ring, a queue of received buffers, one waiting reader) and its send side (a queue of
/// buffers, at most one send or sendmsg in flight, short sends resumed). The connected
/// socket, the data source and the data sink each hold a handle on it.
///
/// Memory: an idle connection holds only this object (a few hundred bytes). Received bytes live
/// in the shard's buffer ring while a reader has not taken them; the queues allocate their slots
/// on first use; the iovec array of a vectored send is borrowed from a per-shard cache for the
/// time the kernel holds the send.
///
/// Teardown: when the last handle goes, the receive is cancelled and queued output keeps going
/// (as after close(2)); the object closes the fd and frees itself only once every request the
/// kernel holds, cancellations included, has completed. A reactor that stops cancels whatever
/// is left, which ends lingering sends too.
class connection final : public buffer_waiter {
public:
    /// Wraps connected socket `fd`, taking ownership; `peer` is the remote address.
    static connected_socket make_socket(int fd, const socket_address& peer);

    /// Adds a handle (the connected socket, the data source or the data sink).
    void hold() noexcept { ++_handles; }
    /// Drops a handle. After the last one receiving stops, unread data is dropped, and the
    /// object frees itself once queued output is sent and the kernel holds no request of it.
    void release() noexcept;

    // --- receiving (see data_source_impl)
    /// The next received buffer (arming the receive when needed); empty at end of stream. One
    /// read at a time.
    future<temporary_buffer> get();
    /// `get()` that `as` can cancel: on abort the pending read fails at once with the abort's
    /// reason and the armed receive is cancelled until the next read (bytes already received
    /// stay queued for it). Fails at once if `as` was already aborted.
    future<temporary_buffer> get(abort_source& as);
    /// Drops unread data, ends the stream for the reader and cancels the receive.
    future<> close_input();
    /// `close_input` plus shutdown(SHUT_RD) of the socket.
    void shutdown_input();
    /// Sets the data source whose end-of-stream flag this connection sets (null: none).
    void attach_source(tcp_data_source* s) noexcept { _source = s; }

    // --- sending (see data_sink_impl)
    /// Queues `buf` for sending; waits while more than `config::send_window` bytes are queued.
    future<> put(temporary_buffer buf);
    /// Queues every buffer of `bufs` (moved out), in order; they leave in one sendmsg when no
    /// send is in flight. Waits as `put` does.
    future<> put_many(std::span<temporary_buffer> bufs);
    /// Resolves at once (the queue is sent in the background) unless a send failed.
    future<> flush();
    /// Refuses further puts; resolves once the queue is sent and the write side is shut down.
    future<> close_output();
    /// Refuses further puts and shuts the write side down once the queue is sent, without waiting.
    void shutdown_output();

    /// Breaks the connection now: SO_LINGER 0 (the close sends a reset and drops unsent bytes),
    /// shutdown of both directions, the receive and an in-flight send are cancelled; the pending
    /// read and later reads fail, the waiting write, flush or close and later ones fail, queued
    /// output is dropped (buffers the kernel still reads stay alive until its completion).
    void abort() noexcept;

    // --- options and addresses
    /// Sets TCP_NODELAY; throws std::system_error.
    void set_nodelay(bool on);
    /// Reads TCP_NODELAY; throws std::system_error.
    bool get_nodelay() const;
    /// Sets SO_KEEPALIVE; throws std::system_error.
    void set_keepalive(bool on);
    /// Reads SO_KEEPALIVE; throws std::system_error.
    bool get_keepalive() const;
    /// The socket's local address (getsockname); throws std::system_error.
    socket_address local_address() const;
    /// The remote address given at creation.
    const socket_address& peer_address() const noexcept { return _peer; }

    /// Called by the canceller when one of our cancellations completed.
    void cancel_done() noexcept { maybe_destroy(); }

private:
    connection(int fd, const socket_address& peer);
    ~connection();

    struct recv_completion final : io_completion {
        connection* c;
        void complete(int result, uint32_t flags) noexcept override { c->on_recv(result, flags); }
    };
    struct send_completion final : io_completion {
        connection* c;
        void complete(int result, uint32_t flags) noexcept override { c->on_send(result, flags); }
    };
    /// Starts the next send once the tasks that are running now have queued their writes.
    struct send_task final : task {
        connection* c;
        void run_and_dispose() noexcept override { c->run_send_task(); }
    };
    enum class recv_state : uint8_t { idle, armed, cancelling };

    bool recv_wanted() const noexcept;
    void maybe_arm_recv(bool poll_first = false) noexcept;
    void cancel_recv() noexcept;
    void on_recv(int result, uint32_t flags) noexcept;
    void deliver(temporary_buffer buf) noexcept;
    void recv_failed(std::exception_ptr ex) noexcept;
    void abort_read(const std::exception_ptr& ex) noexcept;
    void end_input() noexcept;
    void buffers_available() noexcept override;

    void schedule_send() noexcept;
    void run_send_task() noexcept;
    void start_send();
    void on_send(int result, uint32_t flags) noexcept;
    future<> check_put() const;
    future<> queued(size_t bytes);
    void send_failed(std::exception_ptr ex) noexcept;
    void output_drained() noexcept;
    void do_shutdown_output() noexcept;

    void maybe_destroy() noexcept;
    int setsockopt_or_throw(int level, int name, int value, const char* what);
    int getsockopt_int(int level, int name) const;

    int _fd;
    socket_address _peer;
    unsigned _handles = 0;
    canceller<connection> _canceller{*this};

    // receive side
    recv_completion _recv_c;
    recv_state _recv = recv_state::idle;
    buffer_ring* _ring = nullptr; // the ring the receive is armed on, or waits for
    bool _recv_cancel_requested = false;
    bool _waiting_buffers = false;
    bool _recv_paused = false; // the reader fell behind: no receive until it catches up
    bool _reading = false;     // a reader asked for data at least once
    bool _input_ended = false; // peer closed, shutdown_input or close: reads return end of stream
    std::exception_ptr _recv_error;
    buffer_queue _recvq;
    size_t _unread = 0;
    size_t _max_unread;
    std::optional<promise<temporary_buffer>> _read_waiter;
    abort_source::subscription _read_abort; // the waiting read's cancellation, if it has one
    tcp_data_source* _source = nullptr;

    // send side
    send_completion _send_c;
    send_task _send_task;
    bool _send_in_flight = false;
    bool _send_scheduled = false;
    bool _output_closed = false;         // close/shutdown_output: no more puts
    bool _shutdown_when_drained = false; // SHUT_WR once the queue is empty
    bool _shut_wr = false;
    bool _aborted = false;
    std::exception_ptr _send_error;
    buffer_queue _sendq;
    size_t _send_queued = 0; // bytes in _sendq (in flight included)
    size_t _in_flight_bytes = 0;
    size_t _send_window;
    std::optional<promise<>> _put_waiter;
    std::optional<promise<>> _drain_waiter;
    send_vector* _vec = nullptr; // held while a vectored send is in flight
};

} // namespace shoal::net::tcp::internal
