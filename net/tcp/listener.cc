#include "net/tcp/listener.hh"

#include "net/tcp/buffer_ring.hh"
#include "net/tcp/connection.hh"

#include <algorithm>
#include <cerrno>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace shoal::net::tcp::internal {

namespace {

constexpr auto min_backoff = std::chrono::milliseconds(1);
constexpr auto max_backoff = std::chrono::milliseconds(100);
constexpr auto log_interval = std::chrono::seconds(10);
/// Connections refused per failed accept at most, so one round never holds the shard long.
constexpr int max_refusals_per_round = 64;

/// Errors that say the process or the system is out of descriptors or memory for now.
bool out_of_resources(int err) noexcept {
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

/// Errors of one connection that accept(2) reports (it was reset or its network went away
/// before it was taken): the listener is fine.
bool connection_error(int err) noexcept {
    return err == ECONNABORTED || err == EPROTO || err == ENETDOWN || err == ENOPROTOOPT ||
           err == EHOSTDOWN || err == ENONET || err == EHOSTUNREACH || err == ENETUNREACH || err == EPERM;
}

int open_reserve() noexcept {
    return ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

} // namespace

listener::listener(int fd, const socket_address& addr, int backlog, std::string refusal)
    : _fd(fd)
    , _addr(addr)
    , _max_queue(size_t(std::max(backlog, 16)))
    , _refusal(std::move(refusal)) {
    _c.l = this;
    if (!_refusal.empty()) {
        _reserve_fd = open_reserve();
    }
    _retry.set_callback([this] { retry(); });
}

listener::~listener() {
    close_fd();
}

void listener::close_fd() noexcept {
    if (_fd >= 0) {
        ::close(_fd);
        _fd = -1;
    }
    if (_reserve_fd >= 0) {
        ::close(_reserve_fd);
        _reserve_fd = -1;
    }
}

void listener::arm() {
    io_uring_sqe* sqe = local_reactor().get_sqe();
    io_uring_prep_multishot_accept(sqe, _fd, nullptr, nullptr, SOCK_CLOEXEC);
    io_uring_sqe_set_data(sqe, static_cast<io_completion*>(&_c));
    _state = state::armed;
}

void listener::cancel() noexcept {
    if (_state != state::armed) {
        return;
    }
    try {
        _canceller.cancel(&_c);
        _state = state::cancelling;
        _cancel_requested = true;
    } catch (...) {
        // No SQE: the accept stays armed; what it delivers is closed or queued as usual.
    }
}

future<accept_result> listener::accept() {
    if (!_queue.empty()) {
        accept_result r = std::move(_queue.front());
        _queue.pop_front();
        return make_ready_future<accept_result>(std::move(r));
    }
    if (_pending_error) {
        return make_exception_future<accept_result>(std::exchange(_pending_error, nullptr));
    }
    if (_aborted) {
        return make_exception_future<accept_result>(make_error(ECONNABORTED, "accept", _addr));
    }
    if (_waiter) {
        return make_exception_future<accept_result>(
            std::logic_error("server_socket: accept() called while another accept is pending"));
    }
    if (_state == state::idle) { // backing_off: the retry timer arms it
        if (local_reactor().stopping()) {
            return make_exception_future<accept_result>(make_error(ECANCELED, "accept", _addr));
        }
        try {
            // The shard's receive ring (and its eventfd) exists before the first connection
            // does: a server that runs out of descriptors later still reads what it accepted.
            buffer_ring::local();
            arm();
        } catch (...) {
            return make_exception_future<accept_result>(std::current_exception());
        }
    }
    _waiter.emplace();
    return _waiter->get_future();
}

future<accept_result> listener::accept(abort_source& as) {
    if (as.abort_requested()) {
        return make_exception_future<accept_result>(as.abort_exception());
    }
    auto f = accept();
    if (_waiter && !f.available()) {
        _abort_sub = as.subscribe([this](const std::exception_ptr& ex) { abort_waiter(ex); });
    }
    return f;
}

void listener::abort_waiter(const std::exception_ptr& ex) noexcept {
    if (!_waiter) {
        return;
    }
    _waiter->set_exception(ex);
    _waiter.reset();
    // Nobody waits: stop the multishot accept (the kernel's backlog holds new connections;
    // those accepted before the cancel completes are queued). The next accept() arms it again.
    cancel();
}

void listener::fail_waiter(std::exception_ptr ex) noexcept {
    if (_waiter) {
        _waiter->set_exception(std::move(ex));
        _waiter.reset();
        _abort_sub = {};
    }
}

void listener::on_accept(int result, uint32_t flags) noexcept {
    const bool more = flags & IORING_CQE_F_MORE;
    const bool cancelled_by_us = _cancel_requested;
    bool failed = false;
    if (!more) {
        _state = state::idle;
        _cancel_requested = false;
    }
    if (result >= 0) {
        int fd = result;
        _backoff = {};
        if (_aborted) {
            ::close(fd);
        } else {
            try {
                sockaddr_storage ss{};
                socklen_t len = sizeof(ss);
                ::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len);
                socket_address peer(reinterpret_cast<sockaddr*>(&ss), len);
                accept_result r{connection::make_socket(fd, peer), peer};
                ++local_stats().accepted;
                if (_waiter) {
                    _waiter->set_value(std::move(r));
                    _waiter.reset();
                    _abort_sub = {};
                } else {
                    _queue.push_back(std::move(r));
                }
            } catch (...) {
                fail_waiter(std::current_exception());
            }
            if (more && _queue.size() >= _max_queue) {
                cancel(); // the application is behind: let the kernel's backlog hold the rest
            }
        }
    } else if (result == -ECANCELED && cancelled_by_us) {
        // Paused or aborted.
    } else if (!_aborted && (out_of_resources(-result) || connection_error(-result))) {
        // The listener is fine: out of descriptors or memory (the connection stays in the
        // kernel's backlog), or one connection went away.
        if (!more) {
            back_off(-result); // accept again after a pause
            maybe_destroy();
            return;
        }
        if (out_of_resources(-result)) {
            ++local_stats().accept_errors;
        }
        tcp_log.debug("accept on {}: {}; still accepting", _addr.to_string(),
                      std::system_category().message(-result));
    } else {
        // A reactor that stops (ECANCELED), a socket that is no longer listening...: the accept
        // is over; the error goes to the application.
        failed = true;
        auto ex = std::make_exception_ptr(make_error(-result, "accept", _addr));
        if (_waiter) {
            fail_waiter(ex);
        } else if (!_aborted) {
            _pending_error = ex;
        }
    }
    if (!more) {
        if (_aborted) {
            close_fd();
        } else if (!failed && _waiter && !local_reactor().stopping()) {
            try {
                arm(); // the kernel ended the multishot on its own: keep accepting
            } catch (...) {
                fail_waiter(std::current_exception());
            }
        }
    }
    maybe_destroy();
}

void listener::back_off(int err) noexcept {
    const bool resources = out_of_resources(err);
    if (resources) {
        ++local_stats().accept_errors;
        if (err == EMFILE || err == ENFILE) {
            refuse_waiting();
        }
        ++_errors_since_log;
        auto now = steady_clock_type::now();
        if (_last_log == steady_clock_type::time_point{} || now - _last_log >= log_interval) {
            tcp_log.warn("accept on {}: {} ({} time(s) since the last report); retrying in up to {} ms",
                         _addr.to_string(), std::system_category().message(err), _errors_since_log,
                         std::chrono::duration_cast<std::chrono::milliseconds>(max_backoff).count());
            _last_log = now;
            _errors_since_log = 0;
        }
        _backoff = std::clamp<steady_clock_type::duration>(_backoff * 2, min_backoff, max_backoff);
    } else {
        tcp_log.debug("accept on {}: {}; accepting again", _addr.to_string(),
                      std::system_category().message(err));
        _backoff = {};
    }
    _state = state::backing_off;
    _retry.arm(_backoff);
}

void listener::retry() noexcept {
    _state = state::idle; // abort_accept() cancels this timer: not aborted here
    if (!_waiter) {
        return; // the next accept() arms
    }
    if (local_reactor().stopping()) {
        fail_waiter(std::make_exception_ptr(make_error(ECANCELED, "accept", _addr)));
        return;
    }
    try {
        arm();
    } catch (...) {
        back_off(ENOMEM); // no SQE now: try again later
    }
}

void listener::refuse_waiting() noexcept {
    if (_refusal.empty()) {
        return;
    }
    if (_reserve_fd < 0) {
        // Lost to another thread last time: take it back when a descriptor is free.
        _reserve_fd = open_reserve();
        return;
    }
    ::close(_reserve_fd);
    _reserve_fd = -1;
    // The multishot accept is over (the error ended it): nothing else accepts on this socket,
    // so a connection poll reports is there for the blocking accept4 below.
    for (int i = 0; i < max_refusals_per_round; ++i) {
        pollfd p{_fd, POLLIN, 0};
        if (::poll(&p, 1, 0) != 1 || !(p.revents & POLLIN)) {
            break;
        }
        int c = ::accept4(_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) {
            break;
        }
        ::send(c, _refusal.data(), _refusal.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        // Read what the client already sent so that closing sends a FIN, not a reset that
        // could destroy the refusal before the client reads it.
        char scratch[512];
        for (int r = 0; r < 8 && ::recv(c, scratch, sizeof(scratch), MSG_DONTWAIT) > 0; ++r) {
        }
        ::shutdown(c, SHUT_WR);
        ::close(c);
        ++local_stats().refused_connections;
        ++_refused;
    }
    _reserve_fd = open_reserve();
}

void listener::abort_accept() noexcept {
    if (_aborted) {
        return;
    }
    _aborted = true;
    if (_waiter) {
        _waiter->set_exception(make_error(ECONNABORTED, "accept", _addr));
        _waiter.reset();
        _abort_sub = {};
    }
    _queue.clear();
    _pending_error = nullptr;
    if (_state == state::armed) {
        cancel();
    }
    if (_state == state::backing_off) {
        _retry.cancel();
        _state = state::idle;
    }
    if (_state == state::idle) {
        close_fd();
    }
}

void listener::release() noexcept {
    _released = true;
    abort_accept();
    maybe_destroy();
}

void listener::maybe_destroy() noexcept {
    if (_released && _state == state::idle && _canceller.pending() == 0) {
        delete this;
    }
}

} // namespace shoal::net::tcp::internal
