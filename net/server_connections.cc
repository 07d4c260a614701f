#include "net/server_connections.hh"

#include "core/coroutine.hh"
#include "core/log.hh"
#include "core/timer.hh"

#include <utility>

namespace shoal::net {

namespace {
logger server_log("server");
} // namespace

void server_connections::accept_from(server_socket& listener, handler serve) {
    if (!_gate.try_enter()) {
        return;
    }
    _listeners.push_back(&listener);
    (void)accept_loop(listener, std::move(serve)).finally([this] { _gate.leave(); });
}

future<> server_connections::accept_loop(server_socket& listener, handler serve) {
    for (;;) {
        accept_result ar;
        try {
            ar = co_await listener.accept();
        } catch (...) {
            if (!stopping()) {
                server_log.warn("accept failed, no longer accepting: {}", std::current_exception());
            }
            co_return;
        }
        if (!add(std::move(ar.connection), serve)) {
            co_return;
        }
    }
}

bool server_connections::add(connected_socket s, handler serve) {
    if (!_gate.try_enter()) {
        return false;
    }
    ++_served;
    auto it = _open.insert(_open.end(), std::move(s));
    (void)run(it, std::move(serve)).finally([this] { _gate.leave(); });
    return true;
}

future<> server_connections::run(std::list<connected_socket>::iterator it, handler serve) {
    try {
        co_await serve(*it);
    } catch (...) {
        ++_failed;
        server_log.debug("serving a connection failed: {}", std::current_exception());
    }
    _open.erase(it);
}

void server_connections::abort_open() noexcept {
    // Aborting fails promises, which schedule their continuations: no serve function runs (and
    // erases its entry) during this loop.
    for (auto& s : _open) {
        ++_aborted;
        s.abort();
    }
}

future<> server_connections::stop(steady_clock_type::duration drain) {
    auto done = _gate.close();
    for (server_socket* l : _listeners) {
        try {
            l->abort_accept();
        } catch (...) {
            server_log.debug("abort_accept failed: {}", std::current_exception());
        }
    }
    for (auto& s : _open) {
        try {
            s.shutdown_input();
        } catch (...) {
            // Already broken: the serve loop sees the error itself.
        }
    }
    timer<> deadline([this] { abort_open(); });
    if (!done.available()) {
        if (drain <= steady_clock_type::duration::zero()) {
            abort_open();
        } else {
            deadline.arm(drain);
        }
    }
    co_await std::move(done);
    deadline.cancel();
    _listeners.clear();
}

} // namespace shoal::net
