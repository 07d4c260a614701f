#include "net/tcp/listener.hh"

#include "net/tcp/connection.hh"

#include <algorithm>
#include <cerrno>

#include <sys/socket.h>
#include <unistd.h>

namespace shoal::net::tcp::internal {

listener::listener(int fd, const socket_address& addr, int backlog)
    : _fd(fd)
    , _addr(addr)
    , _max_queue(size_t(std::max(backlog, 16))) {
    _c.l = this;
}

listener::~listener() {
    close_fd();
}

void listener::close_fd() noexcept {
    if (_fd >= 0) {
        ::close(_fd);
        _fd = -1;
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
    if (_state == state::idle) {
        if (local_reactor().stopping()) {
            return make_exception_future<accept_result>(make_error(ECANCELED, "accept", _addr));
        }
        try {
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
                if (_waiter) {
                    _waiter->set_exception(std::current_exception());
                    _waiter.reset();
                    _abort_sub = {};
                }
            }
            if (more && _queue.size() >= _max_queue) {
                cancel(); // the application is behind: let the kernel's backlog hold the rest
            }
        }
    } else if (result == -ECANCELED && cancelled_by_us) {
        // Paused or aborted.
    } else {
        // EMFILE, ENFILE, ENOMEM, a reactor that stops (ECANCELED)...: the accept is over; the
        // error goes to the application, and the next accept() arms again (no retry loop here).
        failed = true;
        auto ex = std::make_exception_ptr(make_error(-result, "accept", _addr));
        if (_waiter) {
            _waiter->set_exception(ex);
            _waiter.reset();
            _abort_sub = {};
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
                _waiter->set_exception(std::current_exception());
                _waiter.reset();
                _abort_sub = {};
            }
        }
    }
    maybe_destroy();
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
