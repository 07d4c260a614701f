#pragma once

#include "core/abort_source.hh"
#include "core/future.hh"
#include "core/reactor.hh"
#include "core/timer.hh"
#include "net/socket_address.hh"
#include "net/stream.hh"
#include "net/tcp/internal.hh"

#include <cstddef>
#include <deque>
#include <exception>
#include <optional>
#include <string>

namespace shoal::net::tcp::internal {

/// A listening socket with one multishot accept in the ring: the kernel posts a completion per
/// incoming connection without a new request each time. Connections accepted while nobody
/// waits in `accept()` are queued; past `backlog` of them the accept is cancelled until the
/// application catches up (the kernel's own backlog then holds the rest).
///
/// When the kernel cannot give a connection a descriptor or memory (EMFILE, ENFILE, ENOBUFS,
/// ENOMEM) the listener does not fail: it backs off (1 ms, doubling up to 100 ms) and accepts
/// again, logging at most once per 10 s and counting each failure (`stats::accept_errors`).
/// With a refusal message (`listen_options::refusal`) it keeps a descriptor in reserve and,
/// out of descriptors, frees it to accept the waiting connections, answer each with the
/// message and close it (`stats::refused_connections`).
///
/// The object outlives the server_socket that owns it until its last completion, cancellations
/// included, has arrived; only then is the fd closed (a queued accept SQE names the fd).
class listener final {
public:
    /// Takes over listening socket `fd`, bound to `addr`; pauses accepting while `backlog` (at
    /// least 16) accepted connections wait unclaimed. A non-empty `refusal` is what connections
    /// get when no descriptor is left for them (a reserve descriptor is opened for it).
    listener(int fd, const socket_address& addr, int backlog, std::string refusal = {});

    /// The next connection (queued ones first); arms the multishot accept when none is armed.
    /// One accept at a time.
    future<accept_result> accept();
    /// `accept()` that `as` can cancel: on abort the pending accept fails at once with the
    /// abort's reason and the multishot accept is cancelled until the next accept (connections
    /// that arrive meanwhile wait in the kernel's backlog or in our queue).
    future<accept_result> accept(abort_source& as);
    /// Fails a pending accept and every later one, stops accepting, closes the socket.
    void abort_accept() noexcept;
    /// The owning server_socket is gone: abort and free once the kernel is done.
    void release() noexcept;
    /// The bound address.
    const socket_address& local_address() const noexcept { return _addr; }
    /// Connections this listener answered with its refusal and closed.
    uint64_t refused_connections() const noexcept { return _refused; }

    /// Called by the canceller when one of our cancellations completed.
    void cancel_done() noexcept { maybe_destroy(); }

private:
    struct accept_completion final : io_completion {
        listener* l;
        void complete(int result, uint32_t flags) noexcept override { l->on_accept(result, flags); }
    };
    enum class state : uint8_t { idle, armed, cancelling, backing_off };

    ~listener();
    void arm();
    void cancel() noexcept;
    void abort_waiter(const std::exception_ptr& ex) noexcept;
    void on_accept(int result, uint32_t flags) noexcept;
    void close_fd() noexcept;
    void maybe_destroy() noexcept;
    void back_off(int err) noexcept;
    void retry() noexcept;
    void refuse_waiting() noexcept;
    void fail_waiter(std::exception_ptr ex) noexcept;

    int _fd;
    socket_address _addr;
    size_t _max_queue;
    accept_completion _c;
    canceller<listener> _canceller{*this};
    state _state = state::idle;
    bool _cancel_requested = false;
    bool _aborted = false;
    bool _released = false;
    std::deque<accept_result> _queue;
    std::string _refusal;
    int _reserve_fd = -1;                   // held for refusals; -1 when none (or lost)
    uint64_t _refused = 0;                  // connections answered with `_refusal`
    steady_clock_type::duration _backoff{}; // the last back-off; zero after a success
    timer<> _retry;
    steady_clock_type::time_point _last_log{};
    uint64_t _errors_since_log = 0;
    std::exception_ptr _pending_error;
    std::optional<promise<accept_result>> _waiter;
    abort_source::subscription _abort_sub; // the waiting accept's cancellation, if it has one
};

} // namespace shoal::net::tcp::internal
