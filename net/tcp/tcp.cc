#include "net/tcp/tcp.hh"

#include "core/timer.hh"
#include "net/tcp/connection.hh"
#include "net/tcp/internal.hh"
#include "net/tcp/listener.hh"

#include <cerrno>
#include <mutex>
#include <string>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

namespace shoal::net::tcp {

namespace internal {

logger tcp_log("tcp");

namespace {
thread_local stats tl_stats;
std::mutex config_lock;
config g_config;
} // namespace

stats& local_stats() noexcept {
    return tl_stats;
}

std::system_error make_error(int err, std::string_view op, const socket_address& addr) {
    std::string what(op);
    what += ' ';
    what += addr.to_string();
    return std::system_error(err, std::system_category(), what);
}

int set_nodelay(int fd, bool on) noexcept {
    int v = on ? 1 : 0;
    return ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v)) < 0 ? errno : 0;
}

/// What server_socket holds.
class tcp_server_socket_impl final : public server_socket_impl {
public:
    explicit tcp_server_socket_impl(listener* l) noexcept
        : _l(l) {}
    ~tcp_server_socket_impl() override { _l->release(); }
    future<accept_result> accept() override { return _l->accept(); }
    future<accept_result> accept(abort_source& as) override { return _l->accept(as); }
    void abort_accept() override { _l->abort_accept(); }
    socket_address local_address() const override { return _l->local_address(); }
    uint64_t refused_connections() const noexcept override { return _l->refused_connections(); }

private:
    listener* _l;
};

/// One connect request: the socket, the address the kernel reads at submission, an optional
/// timer that cancels the request. Freed once the connect and any cancellation completed.
class connect_op final : public io_completion {
public:
    connect_op(int fd, const socket_address& addr)
        : _fd(fd)
        , _addr(addr) {}

    future<connected_socket> start(std::chrono::milliseconds timeout, abort_source* as) {
        if (as) {
            // First: nothing is queued yet if it throws.
            _abort_sub = as->subscribe([this](const std::exception_ptr& ex) { on_abort(ex); });
        }
        io_uring_sqe* sqe = local_reactor().get_sqe();
        io_uring_prep_connect(sqe, _fd, _addr.as_sockaddr(), _addr.length());
        io_uring_sqe_set_data(sqe, static_cast<io_completion*>(this));
        auto f = _pr.get_future();
        if (timeout.count() > 0) {
            _timer.set_callback([this] { on_timeout(); });
            _timer.arm(timeout);
        }
        return f;
    }
    void complete(int result, uint32_t) noexcept override {
        _done = true;
        _timer.cancel();
        _abort_sub = {};
        if (_aborted) {
            // The future already failed with the abort's reason; a connection that was made
            // anyway is closed with the op (the destructor closes the fd).
        } else if (result == 0) {
            try {
                int fd = std::exchange(_fd, -1);
                _pr.set_value(internal::connection::make_socket(fd, _addr));
                ++local_stats().connected;
            } catch (...) {
                _pr.set_exception(std::current_exception());
            }
        } else {
            int err = -result;
            if (err == ECANCELED && _timed_out) {
                err = ETIMEDOUT;
            }
            _pr.set_exception(make_error(err, "connect", _addr));
        }
        maybe_destroy();
    }
    void cancel_done() noexcept { maybe_destroy(); }

private:
    ~connect_op() {
        if (_fd >= 0) {
            ::close(_fd);
        }
    }
    void on_abort(const std::exception_ptr& ex) noexcept {
        if (_done || _aborted) {
            return;
        }
        // Fail at once; the request is cancelled and the op (the address the kernel reads, the
        // fd) lives until its completion arrives.
        _aborted = true;
        _timer.cancel();
        _pr.set_exception(ex);
        try {
            _canceller.cancel(this);
        } catch (...) {
            // No SQE: the attempt ends on its own (connected or failed) and is closed then.
        }
    }
    void on_timeout() noexcept {
        if (_done || _aborted) {
            return;
        }
        _timed_out = true;
        try {
            _canceller.cancel(this);
        } catch (...) {
            // No SQE: the kernel's own timeout will end the attempt.
        }
    }
    void maybe_destroy() noexcept {
        if (_done && _canceller.pending() == 0) {
            delete this;
        }
    }

    int _fd;
    socket_address _addr;
    promise<connected_socket> _pr;
    timer<> _timer;
    canceller<connect_op> _canceller{*this};
    abort_source::subscription _abort_sub;
    bool _done = false;
    bool _timed_out = false;
    bool _aborted = false;
};

} // namespace internal

using internal::make_error;

void set_config(const config& cfg) {
    std::lock_guard<std::mutex> g(internal::config_lock);
    internal::g_config = cfg;
}

config get_config() {
    std::lock_guard<std::mutex> g(internal::config_lock);
    return internal::g_config;
}

const stats& shard_stats() noexcept {
    return internal::tl_stats;
}

server_socket listen(const socket_address& addr, const listen_options& opts) {
    int fd = ::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        throw make_error(errno, "listen", addr);
    }
    auto fail = [&](int err) {
        ::close(fd);
        return make_error(err, "listen", addr);
    };
    int one = 1;
    if (opts.reuse_address && ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0) {
        throw fail(errno);
    }
    if (opts.reuse_port && ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) {
        throw fail(errno);
    }
    // Accepted sockets inherit TCP_NODELAY from the listener: one setsockopt for all of them.
    if (get_config().nodelay) {
        if (int err = internal::set_nodelay(fd, true)) {
            throw fail(err);
        }
    }
    if (::bind(fd, addr.as_sockaddr(), addr.length()) < 0) {
        throw fail(errno);
    }
    if (::listen(fd, opts.backlog) < 0) {
        throw fail(errno);
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) < 0) {
        throw fail(errno);
    }
    socket_address bound(reinterpret_cast<sockaddr*>(&ss), len);
    auto* l = new internal::listener(fd, bound, opts.backlog, opts.refusal);
    try {
        return server_socket(std::make_unique<internal::tcp_server_socket_impl>(l));
    } catch (...) {
        l->release();
        throw;
    }
}

future<connected_socket> connect(const socket_address& addr, const connect_options& opts) {
    return internal::start_connect(addr, opts, nullptr);
}

future<connected_socket> connect(const socket_address& addr, const connect_options& opts, abort_source& as) {
    if (as.abort_requested()) {
        return make_exception_future<connected_socket>(as.abort_exception());
    }
    return internal::start_connect(addr, opts, &as);
}

future<connected_socket> internal::start_connect(const socket_address& addr, const connect_options& opts,
                                                 abort_source* as) {
    if (local_reactor().stopping()) {
        return make_exception_future<connected_socket>(make_error(ECANCELED, "connect", addr));
    }
    int fd = ::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return make_exception_future<connected_socket>(make_error(errno, "connect", addr));
    }
    if (get_config().nodelay) {
        internal::set_nodelay(fd, true);
    }
    if (opts.local && ::bind(fd, opts.local->as_sockaddr(), opts.local->length()) < 0) {
        int err = errno;
        ::close(fd);
        return make_exception_future<connected_socket>(
            make_error(err, "connect " + addr.to_string() + ": bind", *opts.local));
    }
    internal::connect_op* op;
    try {
        op = new internal::connect_op(fd, addr);
    } catch (...) {
        ::close(fd);
        return make_exception_future<connected_socket>(std::current_exception());
    }
    try {
        return op->start(opts.timeout, as);
    } catch (...) {
        // No SQE was queued: the op never reaches the kernel.
        op->complete(-EAGAIN, 0);
        return make_exception_future<connected_socket>(std::current_exception());
    }
}

} // namespace shoal::net::tcp
