#include "net/server_connections.hh"

#include "core/coroutine.hh"
#include "core/log.hh"
#include "core/timer.hh"

#include <algorithm>
#include <cerrno>
#include <new>
#include <system_error>
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
    // A transport that reports a shortage of descriptors or memory instead of waiting it out
    // (TCP's listener waits it out itself) is retried after a pause: 1 ms doubling up to
    // 100 ms, reset by a success. Any other error ends the loop.
    steady_clock_type::duration backoff{};
    steady_clock_type::time_point last_log{};
    uint64_t errors_since_log = 0;
    for (;;) {
        accept_result ar;
        std::exception_ptr failed;
        try {
            ar = co_await listener.accept();
        } catch (...) {
            failed = std::current_exception();
        }
        if (!failed) {
            backoff = {};
            if (!add(std::move(ar.connection), serve)) {
                co_return;
            }
            continue;
        }
        if (stopping()) {
            co_return;
        }
        if (!is_resource_shortage(failed)) {
            server_log.warn("accept failed, no longer accepting: {}", failed);
            co_return;
        }
        ++_accept_errors;
        ++errors_since_log;
        auto now = steady_clock_type::now();
        if (last_log == steady_clock_type::time_point{} || now - last_log >= std::chrono::seconds(10)) {
            server_log.warn("accept failed ({} time(s) since the last report), retrying: {}",
                            errors_since_log, failed);
            last_log = now;
            errors_since_log = 0;
        }
        backoff = std::clamp<steady_clock_type::duration>(backoff * 2, std::chrono::milliseconds(1),
                                                          std::chrono::milliseconds(100));
        try {
            co_await sleep_abortable(backoff, _stop_accepting);
        } catch (...) {
            co_return; // stop()
        }
    }
}

bool server_connections::is_resource_shortage(const std::exception_ptr& ex) noexcept {
    try {
        std::rethrow_exception(ex);
    } catch (const std::system_error& e) {
        int err = e.code().value();
        return e.code().category() == std::system_category() &&
               (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM);
    } catch (const std::bad_alloc&) {
        return true;
    } catch (...) {
        return false;
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
    _stop_accepting.request_abort();
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
