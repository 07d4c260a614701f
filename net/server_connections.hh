#pragma once

#include "core/abort_source.hh"
#include "core/clock.hh"
#include "core/future.hh"
#include "core/gate.hh"
#include "net/stream.hh"

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <list>

namespace shoal::net {

/// The connections of one server on one shard, and the way it stops in bounded time whatever
/// its peers do. A server hands every accepted connection (or its listener, which then runs the
/// accept loop here) to the tracker with the function that serves it; `stop(drain)` stops
/// accepting, shuts every connection's input down so that serve loops see end of stream and
/// finish their replies, waits at most `drain` for them, then aborts the connections still
/// open (`connected_socket::abort()`: pending reads and writes fail at once) and resolves when
/// every serve function has returned. Only the transport-neutral API is used, so it works for
/// TCP and RDMA alike. One shard; not copyable.
class server_connections {
public:
    /// Serves one connection; the tracker keeps its own handle on the socket to end it.
    using handler = std::function<future<>(connected_socket)>;

    server_connections() = default;
    server_connections(const server_connections&) = delete;
    server_connections& operator=(const server_connections&) = delete;
    /// Call `stop()` (and wait for it) before destroying a tracker that served anything.
    ~server_connections() = default;

    /// Accepts from `listener` until `stop()`, serving each connection with `serve` as `add`
    /// does. An accept that fails for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS,
    /// ENOMEM, bad_alloc) is retried after a pause (1 ms doubling to 100 ms), logged at most
    /// once per 10 s; any other accept error is logged and ends accepting from `listener`.
    /// `listener` must outlive the future of `stop()`.
    void accept_from(server_socket& listener, handler serve);
    /// Serves `s` with `serve(s)`, tracked until its future resolves (a failure is counted and
    /// logged at debug level). Returns false, dropping `s`, once `stop()` has begun.
    bool add(connected_socket s, handler serve);

    /// Stops accepting, ends every connection's input, waits up to `drain` for the serve
    /// functions to finish, then aborts the connections left. Resolves when every serve function
    /// and accept loop has returned. Call once.
    future<> stop(steady_clock_type::duration drain);

    /// Connections being served now.
    size_t open() const noexcept { return _open.size(); }
    /// Connections served so far.
    uint64_t served() const noexcept { return _served; }
    /// Serve functions that failed.
    uint64_t failed() const noexcept { return _failed; }
    /// Connections `stop()` aborted because they missed the drain deadline.
    uint64_t aborted() const noexcept { return _aborted; }
    /// Accepts that failed for want of descriptors or memory and were retried.
    uint64_t accept_errors() const noexcept { return _accept_errors; }
    /// True once `stop()` has begun.
    bool stopping() const noexcept { return _gate.is_closed(); }

private:
    future<> accept_loop(server_socket& listener, handler serve);
    future<> run(std::list<connected_socket>::iterator it, handler serve);
    void abort_open() noexcept;
    static bool is_resource_shortage(const std::exception_ptr& ex) noexcept;

    gate _gate;
    abort_source _stop_accepting; // ends the accept loops' back-off pauses
    std::list<connected_socket> _open;
    std::list<server_socket*> _listeners;
    uint64_t _served = 0;
    uint64_t _failed = 0;
    uint64_t _aborted = 0;
    uint64_t _accept_errors = 0;
};

} // namespace shoal::net
