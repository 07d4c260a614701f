#pragma once

#include "core/clock.hh"
#include "core/future.hh"
#include "net/http/request.hh"
#include "net/server_connections.hh"
#include "net/socket_address.hh"
#include "net/stream.hh"

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <string>
#include <vector>

namespace shoal::net::http {

/// What a handler answers.
struct response {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
    /// Further header lines ("Allow", ...), without Content-Type, Content-Length, Connection.
    std::vector<std::pair<std::string, std::string>> headers;
};

/// Serves one route: gets the parsed request head, resolves with the response.
using handler = std::function<future<response>(const request&)>;

/// Limits of an HTTP server.
struct server_limits {
    /// Longest request head (request line and headers); longer ones get 431.
    size_t max_head_bytes = 8192;
    /// Connections served at once. A connection past it closes the one that has waited longest
    /// for a request head (a client that sends nothing, or its head slowly, loses its place to
    /// a fresh one); only when every connection is busy answering does the new one get 503.
    size_t max_connections = 64;
    /// How long a connection may wait for the client's next bytes (a request not begun or not
    /// finished, or the client's FIN after the last response) before it is closed.
    steady_clock_type::duration idle_timeout = std::chrono::seconds(30);
    /// How long a whole request head may take, from its first byte to its blank line, however
    /// steadily its bytes trickle in; then the connection is closed.
    steady_clock_type::duration head_timeout = std::chrono::seconds(10);
    /// After the last response, how long the server waits for the client's FIN (reading and
    /// dropping what it still sends) before it closes anyway.
    steady_clock_type::duration linger = std::chrono::seconds(2);
    /// How long `stop()` lets open connections finish before aborting them.
    steady_clock_type::duration drain = std::chrono::seconds(1);
};

/// A small HTTP/1.1 server on one shard over shoal's TCP stack, for operational endpoints such
/// as Prometheus' `GET /metrics`. It answers routes (exact path and method) with keep-alive and
/// pipelining; everything else gets an error and loses the connection, never the shard: a
/// malformed request 400, an unknown path 404, another method 405 (with `Allow`), a request body
/// 400, an oversized head 431, a handler that fails 500, HTTP/2 or later 505. A client that
/// sends nothing for `idle_timeout`, or takes longer than `head_timeout` over a request head,
/// is closed; past `max_connections` the connection waiting longest for a head is closed to
/// make room (see `server_limits`). Out of file descriptors, the listener answers 503 itself.
class server {
public:
    explicit server(server_limits limits = {})
        : _limits(limits) {}
    server(const server&) = delete;
    server& operator=(const server&) = delete;

    /// Answers `method path` with `h`. Add routes before `start`.
    void add_route(std::string method, std::string path, handler h);
    /// Listens on `addr` (TCP, the calling shard only) and starts serving. Throws what
    /// `tcp::listen` throws ("Address already in use", ...).
    void start(const socket_address& addr);
    /// Stops accepting, lets open connections finish (bounded by `drain`), resolves when all are
    /// done. Call once, after `start`.
    future<> stop();

    /// The address listened on (with the port chosen when it was 0).
    socket_address local_address() const { return _ss.local_address(); }
    /// Requests answered, by any status.
    uint64_t requests() const noexcept { return _requests; }
    /// Requests answered with a 4xx or 5xx status.
    uint64_t errors() const noexcept { return _errors; }
    /// Connections closed because the client sent nothing for `idle_timeout`.
    uint64_t idle_closed() const noexcept { return _idle_closed; }
    /// Connections closed because a request head took longer than `head_timeout`.
    uint64_t head_timeouts() const noexcept { return _head_timeouts; }
    /// Connections closed, while waiting for a request head, to make room for a new one.
    uint64_t evicted() const noexcept { return _evicted; }
    /// Connections open now.
    size_t connections() const noexcept { return _conns.open(); }

private:
    struct route {
        std::string method;
        std::string path;
        handler serve;
    };
    /// A connection waiting for a request head (in `_waiting`, oldest first, until evicted).
    struct waiting {
        connected_socket* socket;
        bool evicted = false;
    };
    class waiting_guard;
    future<> serve(connected_socket s);
    future<response> dispatch(const request& r);
    static response error(int status, std::string reason);
    /// Closes the connection waiting longest for a head; false when none waits.
    bool evict_oldest_waiting() noexcept;

    server_limits _limits;
    std::vector<route> _routes;
    server_socket _ss;
    server_connections _conns;
    uint64_t _requests = 0;
    uint64_t _errors = 0;
    uint64_t _idle_closed = 0;
    uint64_t _head_timeouts = 0;
    uint64_t _evicted = 0;
    std::list<waiting> _waiting;  // oldest first
    std::list<waiting> _evicting; // aborted, their serve functions not yet done
};

} // namespace shoal::net::http
