#include "net/http/server.hh"

#include "core/coroutine.hh"
#include "core/log.hh"
#include "core/timer.hh"
#include "net/tcp/tcp.hh"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

namespace shoal::net::http {

namespace {
logger http_log("http");
/// Bytes read and dropped after the last response of a connection, waiting for the peer's FIN.
constexpr size_t linger_bytes = 64 * 1024;
} // namespace

void server::add_route(std::string method, std::string path, handler h) {
    _routes.push_back({std::move(method), std::move(path), std::move(h)});
}

void server::start(const socket_address& addr) {
    listen_options opts;
    // Connections past the limit wait in the kernel, not in our accept queue holding descriptors.
    opts.backlog = int(std::min<size_t>(_limits.max_connections, 1024));
    opts.refusal = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
                   "Content-Length: 21\r\nConnection: close\r\n\r\ntoo many connections\n";
    _ss = tcp::listen(addr, opts);
    _conns.accept_from(_ss, [this](connected_socket s) { return serve(std::move(s)); });
}

future<> server::stop() {
    return _conns.stop(_limits.drain);
}

response server::error(int status, std::string reason) {
    response r;
    r.status = status;
    r.body = std::move(reason);
    r.body += '\n';
    return r;
}

future<response> server::dispatch(const request& r) {
    bool path_known = false;
    std::string allow;
    for (const auto& rt : _routes) {
        if (rt.path != r.path) {
            continue;
        }
        path_known = true;
        if (rt.method == r.method) {
            if (r.has_body) {
                co_return error(400, "request bodies are not accepted");
            }
            try {
                co_return co_await rt.serve(r);
            } catch (...) {
                http_log.warn("{} {} failed: {}", r.method, r.path, std::current_exception());
                co_return error(500, "the handler failed");
            }
        }
        allow += allow.empty() ? rt.method : ", " + rt.method;
    }
    if (!path_known) {
        co_return error(404, "no such path: " + r.path);
    }
    response e = error(405, r.method + " is not allowed here; use " + allow);
    e.headers.emplace_back("Allow", allow);
    co_return e;
}

/// Keeps a connection in the server's list of those waiting for a request head while it waits.
class server::waiting_guard {
public:
    explicit waiting_guard(server& srv) noexcept
        : _srv(srv) {}
    waiting_guard(const waiting_guard&) = delete;
    waiting_guard& operator=(const waiting_guard&) = delete;
    ~waiting_guard() { leave(); }
    /// Enters the list (at its end: the newest) unless already in it.
    void enter(connected_socket* s) {
        if (!_in) {
            _it = _srv._waiting.insert(_srv._waiting.end(), waiting{s});
            _in = true;
        }
    }
    /// Leaves whichever list it is in.
    void leave() noexcept {
        if (_in) {
            (_it->evicted ? _srv._evicting : _srv._waiting).erase(_it);
            _in = false;
        }
    }

private:
    server& _srv;
    std::list<waiting>::iterator _it;
    bool _in = false;
};

bool server::evict_oldest_waiting() noexcept {
    if (_waiting.empty()) {
        return false;
    }
    auto it = _waiting.begin();
    it->evicted = true;
    _evicting.splice(_evicting.end(), _waiting, it);
    ++_evicted;
    http_log.debug("closing the connection waiting longest for a request head to make room");
    it->socket->abort();
    return true;
}

future<> server::serve(connected_socket s) {
    auto in = s.input();
    auto out = s.output();
    waiting_guard waiting(*this);
    // Each read waits until a deadline at most: the timer aborts it, and the connection ends.
    abort_source expired;
    timer<> deadline([&expired] { expired.request_abort(); });
    enum class why { idle, head, linger };
    auto read = [&](steady_clock_type::time_point until, why w) -> future<temporary_buffer> {
        deadline.rearm(until);
        temporary_buffer b;
        try {
            b = co_await in.read(expired);
        } catch (const abort_requested_exception&) {
            if (w == why::idle) {
                ++_idle_closed;
                http_log.debug(
                    "closing a connection idle for {} ms",
                    std::chrono::duration_cast<std::chrono::milliseconds>(_limits.idle_timeout).count());
            } else if (w == why::head) {
                ++_head_timeouts;
                http_log.debug(
                    "closing a connection whose request head took over {} ms",
                    std::chrono::duration_cast<std::chrono::milliseconds>(_limits.head_timeout).count());
            }
        }
        deadline.cancel();
        co_return b; // empty on timeout: handled as the end of the stream
    };
    std::string buf;
    bool keep = true;
    if (_conns.open() > _limits.max_connections && !evict_oldest_waiting()) {
        keep = false;
        response r = error(503, "too many connections");
        ++_requests;
        ++_errors;
        co_await out.write(
            fmt::format("HTTP/1.1 503 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: "
                        "close\r\n\r\n{}",
                        status_text(503), r.content_type, r.body.size(), r.body));
        co_await out.flush();
    }
    // When the head being received began (its first byte): it must end by head_timeout.
    std::optional<steady_clock_type::time_point> head_began;
    while (keep) {
        std::optional<size_t> end;
        bool too_long = false;
        waiting.enter(&s);
        while (!(end = find_head_end(buf))) {
            if (buf.size() > _limits.max_head_bytes) {
                too_long = true;
                break;
            }
            auto until = steady_clock_type::now() + _limits.idle_timeout;
            why w = why::idle;
            if (head_began && *head_began + _limits.head_timeout < until) {
                until = *head_began + _limits.head_timeout;
                w = why::head;
            }
            temporary_buffer b = co_await read(until, w);
            if (b.empty()) {
                if (!buf.empty()) {
                    http_log.debug("connection closed in the middle of a request head");
                }
                co_await out.close();
                co_return;
            }
            if (!head_began) {
                head_began = steady_clock_type::now();
            }
            buf.append(b.get(), b.size());
        }
        waiting.leave();
        response r;
        if (too_long || *end > _limits.max_head_bytes) {
            r = error(431, "request head longer than " + std::to_string(_limits.max_head_bytes) + " bytes");
            keep = false;
        } else {
            auto [req, err] = parse_request(std::string_view(buf).substr(0, *end));
            buf.erase(0, *end);
            // Bytes after this head begin the next one (pipelined): its clock starts now.
            head_began = buf.empty() ? std::nullopt : std::optional(steady_clock_type::now());
            if (err) {
                r = error(err->status, err->reason);
                keep = false;
            } else {
                r = co_await dispatch(req);
                keep = req.keep_alive && r.status < 400;
            }
        }
        ++_requests;
        if (r.status >= 400) {
            ++_errors;
        }
        std::string head = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n",
                                       r.status, status_text(r.status), r.content_type, r.body.size());
        for (const auto& [name, value] : r.headers) {
            head += fmt::format("{}: {}\r\n", name, value);
        }
        head += keep ? "\r\n" : "Connection: close\r\n\r\n";
        co_await out.write(head);
        co_await out.write(r.body);
        co_await out.flush();
    }
    // Lingering close: FIN first, then read what the peer still sends (up to a bound, for at
    // most `linger`) until it closes, so unread request bytes do not turn our close into a reset
    // that could destroy the response before the peer reads it.
    co_await out.close();
    size_t discarded = 0;
    auto linger_end = steady_clock_type::now() + std::min(_limits.linger, _limits.idle_timeout);
    while (discarded < linger_bytes && !expired.abort_requested()) {
        temporary_buffer b = co_await read(linger_end, why::linger);
        if (b.empty()) {
            break;
        }
        discarded += b.size();
    }
}

} // namespace shoal::net::http
