#include "net/tcp/connection.hh"

#include "net/tcp/send_buffers.hh"

#include <cerrno>
#include <stdexcept>
#include <utility>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

namespace shoal::net::tcp::internal {

// --- the three faces users hold: each keeps a handle on the connection

/// The receiving side handed to input_stream.
class tcp_data_source final : public data_source_impl {
public:
    explicit tcp_data_source(connection& c) noexcept
        : _c(c) {
        _c.hold();
        _c.attach_source(this);
    }
    ~tcp_data_source() override {
        _c.attach_source(nullptr);
        _c.release();
    }
    future<temporary_buffer> get() override { return _c.get(); }
    future<temporary_buffer> get(abort_source& as) override { return _c.get(as); }
    future<> close() override { return _c.close_input(); }
    void mark_eof() noexcept { _eof = true; }

private:
    connection& _c;
};

/// The sending side handed to output_stream.
class tcp_data_sink final : public data_sink_impl {
public:
    explicit tcp_data_sink(connection& c) noexcept
        : _c(c) {
        _c.hold();
        // An idle connection keeps no gathering buffer: after a flush the stream's block goes
        // back to the shard's cache once sent, and the next write takes one from there.
        _release_when_flushed = true;
    }
    ~tcp_data_sink() override { _c.release(); }
    future<> put(temporary_buffer buf) override { return _c.put(std::move(buf)); }
    future<> put_many(std::span<temporary_buffer> bufs) override { return _c.put_many(bufs); }
    future<> flush() override { return _c.flush(); }
    future<> close() override { return _c.close_output(); }
    size_t buffer_size_hint() const noexcept override { return send_buffer_size; }
    temporary_buffer allocate_buffer(size_t size) override { return allocate_send_buffer(size); }

private:
    connection& _c;
};

/// What connected_socket holds.
class tcp_socket_impl final : public connected_socket_impl {
public:
    explicit tcp_socket_impl(connection& c) noexcept
        : _c(c) {
        _c.hold();
    }
    ~tcp_socket_impl() override { _c.release(); }
    std::unique_ptr<data_source_impl> source() override {
        if (std::exchange(_source_taken, true)) {
            throw std::logic_error("connected_socket::input() called twice");
        }
        return std::make_unique<tcp_data_source>(_c);
    }
    std::unique_ptr<data_sink_impl> sink() override {
        if (std::exchange(_sink_taken, true)) {
            throw std::logic_error("connected_socket::output() called twice");
        }
        return std::make_unique<tcp_data_sink>(_c);
    }
    void shutdown_input() override { _c.shutdown_input(); }
    void shutdown_output() override { _c.shutdown_output(); }
    void abort() noexcept override { _c.abort(); }
    void set_nodelay(bool on) override { _c.set_nodelay(on); }
    bool get_nodelay() const override { return _c.get_nodelay(); }
    void set_keepalive(bool on) override { _c.set_keepalive(on); }
    bool get_keepalive() const override { return _c.get_keepalive(); }
    socket_address local_address() const override { return _c.local_address(); }
    socket_address peer_address() const override { return _c.peer_address(); }

private:
    connection& _c;
    bool _source_taken = false;
    bool _sink_taken = false;
};

// --- the iovec arrays of vectored sends

/// What a sendmsg needs to stay put while the kernel holds it. Borrowed for the duration of one
/// send from the shard's cache, so idle connections hold none.
struct send_vector {
    static constexpr unsigned max_iov = 64;
    iovec iov[max_iov];
    msghdr msg;
    send_vector* next;
};

namespace {

/// One shard's spare send vectors, newest first (a warm one is reused).
struct send_vector_cache {
    /// More than this goes back to the heap.
    static constexpr size_t max_kept = 64;
    send_vector* head = nullptr;
    size_t count = 0;
    bool alive = true;
    ~send_vector_cache() {
        alive = false;
        while (head) {
            delete std::exchange(head, head->next);
        }
    }
};

thread_local send_vector_cache tl_vectors;

/// A send vector for one sendmsg: a cached one, else a new one (throws std::bad_alloc).
send_vector* take_send_vector() {
    send_vector_cache& c = tl_vectors;
    if (c.head) {
        --c.count;
        return std::exchange(c.head, c.head->next);
    }
    return new send_vector;
}

/// Gives `v` back once the kernel is done with its send.
void give_back(send_vector* v) noexcept {
    send_vector_cache& c = tl_vectors;
    if (!c.alive || c.count >= send_vector_cache::max_kept) {
        delete v;
        return;
    }
    v->next = c.head;
    c.head = v;
    ++c.count;
}

} // namespace

// --- lifetime

connected_socket connection::make_socket(int fd, const socket_address& peer) {
    connection* c;
    try {
        c = new connection(fd, peer);
    } catch (...) {
        ::close(fd);
        throw;
    }
    try {
        return connected_socket(std::make_shared<tcp_socket_impl>(*c));
    } catch (...) {
        delete c;
        throw;
    }
}

connection::connection(int fd, const socket_address& peer)
    : _fd(fd)
    , _peer(peer) {
    config cfg = get_config();
    _max_unread = std::max<size_t>(cfg.max_unread, 1);
    _send_window = std::max<size_t>(cfg.send_window, 1);
    _recv_c.c = this;
    _send_c.c = this;
    _send_task.c = this;
}

connection::~connection() {
    if (_vec) {
        give_back(_vec);
    }
    ::close(_fd);
}

void connection::release() noexcept {
    if (--_handles > 0) {
        return;
    }
    // Nobody can read any more: stop receiving and drop what was queued. Queued output goes on.
    cancel_recv();
    if (_waiting_buffers) {
        _ring->cancel_wait(*this);
        _waiting_buffers = false;
        _ring = nullptr;
    }
    _recvq.clear();
    _unread = 0;
    maybe_destroy();
}

void connection::maybe_destroy() noexcept {
    if (_handles == 0 && _recv == recv_state::idle && !_send_in_flight && !_send_scheduled &&
        !_waiting_buffers && _canceller.pending() == 0) {
        delete this;
    }
}

// --- receiving

bool connection::recv_wanted() const noexcept {
    return _reading && _handles > 0 && !_input_ended && !_recv_error && _recv == recv_state::idle &&
           !_waiting_buffers && !_recv_paused;
}

void connection::maybe_arm_recv(bool poll_first) noexcept {
    if (!recv_wanted()) {
        return;
    }
    try {
        reactor& r = local_reactor();
        if (r.stopping()) {
            throw make_error(ECANCELED, "recv", _peer);
        }
        buffer_ring& ring = buffer_ring::local();
        io_uring_sqe* sqe = r.get_sqe();
        // One receive per arm, not a multishot one: a multishot receive that stays armed across
        // receives can miss the wake-up of a reset that follows the last bytes closely (seen on
        // 6.18 about once in ten thousand resets), and the connection would wait forever.
        io_uring_prep_recv(sqe, _fd, nullptr, 0, 0);
        if (poll_first) {
            // The socket was just drained: wait for readiness instead of a receive that fails.
            sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;
        }
        sqe->flags |= IOSQE_BUFFER_SELECT;
        sqe->buf_group = ring.group();
        io_uring_sqe_set_data(sqe, static_cast<io_completion*>(&_recv_c));
        _recv = recv_state::armed;
        _ring = &ring;
        ring.add_user();
        ++local_stats().recv_arms;
    } catch (...) {
        recv_failed(std::current_exception());
    }
}

void connection::cancel_recv() noexcept {
    if (_recv != recv_state::armed) {
        return;
    }
    try {
        _canceller.cancel(&_recv_c);
        _recv = recv_state::cancelling;
        _recv_cancel_requested = true;
    } catch (...) {
        // No SQE: the receive stays armed; what it delivers is dropped or queued as usual.
    }
}

void connection::on_recv(int result, uint32_t flags) noexcept {
    const bool cancelled_by_us = _recv_cancel_requested;
    buffer_ring* ring = _ring;
    _recv = recv_state::idle;
    _recv_cancel_requested = false;
    _ring = nullptr;
    bool drained = false;
    if (result > 0) {
        auto& st = local_stats();
        ++st.recv_completions;
        st.recv_bytes += uint64_t(result);
        if (!(flags & IORING_CQE_F_BUFFER)) {
            recv_failed(std::make_exception_ptr(make_error(EIO, "recv (no buffer)", _peer)));
        } else {
            unsigned bid = flags >> IORING_CQE_BUFFER_SHIFT;
            try {
                deliver(ring->take(bid, size_t(result)));
            } catch (...) {
                recv_failed(std::current_exception());
            }
        }
        if (_unread > _max_unread && !_recv_paused) {
            // The reader fell behind: no new receive until it has taken half of what waits.
            _recv_paused = true;
            ++st.recv_paused;
        }
        drained = !(flags & IORING_CQE_F_SOCK_NONEMPTY);
    } else if (result == 0) {
        end_input();
    } else if (result == -ENOBUFS) {
        ++local_stats().buffer_shortages;
        if (recv_wanted()) {
            // Wait for buffers to come back instead of re-arming into an empty ring.
            _waiting_buffers = true;
            _ring = ring;
            try {
                ring->wait_for_buffers(*this);
            } catch (...) {
                _waiting_buffers = false;
                _ring = nullptr;
                recv_failed(std::current_exception());
            }
        }
    } else if (result == -ECANCELED && cancelled_by_us) {
        // Paused because the reader fell behind, or closed: nothing to report.
    } else {
        recv_failed(std::make_exception_ptr(make_error(-result, "recv", _peer)));
    }
    if (ring) {
        ring->remove_user();
    }
    maybe_arm_recv(drained);
    maybe_destroy();
}

void connection::buffers_available() noexcept {
    _waiting_buffers = false;
    _ring = nullptr;
    maybe_arm_recv();
    maybe_destroy();
}

void connection::deliver(temporary_buffer buf) noexcept {
    if (buf.empty() || _input_ended || _handles == 0) {
        return;
    }
    if (_read_waiter) {
        _read_abort = {};
        _read_waiter->set_value(std::move(buf));
        _read_waiter.reset();
        return;
    }
    _unread += buf.size();
    _recvq.push_back(std::move(buf));
}

void connection::recv_failed(std::exception_ptr ex) noexcept {
    if (!_recv_error) {
        _recv_error = std::move(ex);
    }
    if (_read_waiter) {
        _read_abort = {};
        _read_waiter->set_exception(_recv_error);
        _read_waiter.reset();
    }
}

void connection::end_input() noexcept {
    _input_ended = true;
    if (_read_waiter) {
        if (_source) {
            _source->mark_eof();
        }
        _read_abort = {};
        _read_waiter->set_value(temporary_buffer());
        _read_waiter.reset();
    }
}

future<temporary_buffer> connection::get() {
    if (!_recvq.empty()) {
        temporary_buffer b = std::move(_recvq.front());
        _recvq.pop_front();
        _unread -= b.size();
        if (_recv_paused && _unread <= _max_unread / 2) {
            _recv_paused = false;
        }
        maybe_arm_recv();
        return make_ready_future<temporary_buffer>(std::move(b));
    }
    if (_recv_error) {
        return make_exception_future<temporary_buffer>(_recv_error);
    }
    if (_input_ended) {
        if (_source) {
            _source->mark_eof();
        }
        return make_ready_future<temporary_buffer>();
    }
    if (_read_waiter) {
        return make_exception_future<temporary_buffer>(
            std::logic_error("input_stream: read() called while another read is pending"));
    }
    _reading = true;
    maybe_arm_recv();
    if (_recv_error) {
        return make_exception_future<temporary_buffer>(_recv_error);
    }
    _read_waiter.emplace();
    return _read_waiter->get_future();
}

future<temporary_buffer> connection::get(abort_source& as) {
    if (as.abort_requested()) {
        return make_exception_future<temporary_buffer>(as.abort_exception());
    }
    auto f = get();
    if (_read_waiter && !f.available()) {
        _read_abort = as.subscribe([this](const std::exception_ptr& ex) { abort_read(ex); });
    }
    return f;
}

void connection::abort_read(const std::exception_ptr& ex) noexcept {
    if (!_read_waiter) {
        return;
    }
    _read_waiter->set_exception(ex);
    _read_waiter.reset();
    // Nobody reads now: cancel the receive so the kernel holds no request for this reader. Bytes
    // that arrived or arrive before the cancel completes are queued for the next read; the ring's
    // buffers stay the ring's. The next read arms a receive again.
    _reading = false;
    cancel_recv();
}

future<> connection::close_input() {
    _recvq.clear();
    _unread = 0;
    end_input();
    cancel_recv();
    return make_ready_future<>();
}

void connection::shutdown_input() {
    _recvq.clear();
    _unread = 0;
    end_input();
    cancel_recv();
    ::shutdown(_fd, SHUT_RD);
}

// --- sending

future<> connection::check_put() const {
    if (_send_error) {
        return make_exception_future<>(_send_error);
    }
    if (_output_closed) {
        return make_exception_future<>(make_error(EPIPE, "send (output closed)", _peer));
    }
    return make_ready_future<>();
}

future<> connection::queued(size_t bytes) {
    if (bytes == 0) {
        return make_ready_future<>();
    }
    _send_queued += bytes;
    schedule_send();
    if (_send_queued <= _send_window) {
        return make_ready_future<>();
    }
    _put_waiter.emplace();
    return _put_waiter->get_future();
}

future<> connection::put(temporary_buffer buf) {
    if (auto ok = check_put(); ok.failed()) {
        return ok;
    }
    size_t bytes = buf.size();
    if (bytes) {
        _sendq.push_back(std::move(buf));
    }
    return queued(bytes);
}

future<> connection::put_many(std::span<temporary_buffer> bufs) {
    if (auto ok = check_put(); ok.failed()) {
        return ok;
    }
    size_t bytes = 0;
    for (auto& b : bufs) {
        if (!b.empty()) {
            bytes += b.size();
            _sendq.push_back(std::move(b));
        }
    }
    return queued(bytes);
}

void connection::schedule_send() noexcept {
    if (!_send_in_flight && !_send_scheduled) {
        _send_scheduled = true;
        schedule(&_send_task);
    }
}

void connection::run_send_task() noexcept {
    _send_scheduled = false;
    if (!_send_in_flight && !_sendq.empty() && !_send_error) {
        try {
            start_send();
        } catch (...) {
            send_failed(std::current_exception());
        }
    }
    maybe_destroy();
}

void connection::start_send() {
    reactor& r = local_reactor();
    if (r.stopping()) {
        // The reactor is cancelling everything on its way out (a cancelled send that had made
        // progress completes with its byte count): start nothing it would have to wait for.
        throw make_error(ECANCELED, "send", _peer);
    }
    size_t n = std::min<size_t>(_sendq.size(), send_vector::max_iov);
    send_vector* vec = n > 1 ? take_send_vector() : nullptr; // before the SQE: may throw
    io_uring_sqe* sqe;
    try {
        sqe = r.get_sqe();
    } catch (...) {
        if (vec) {
            give_back(vec);
        }
        throw;
    }
    auto& st = local_stats();
    // No MSG_WAITALL: when the socket buffer fills, the send completes with what it took and we
    // send the rest. Buffers then go back (to the receive ring, for an echo) as their bytes
    // leave, instead of all at once when the last byte of a large batch has gone.
    const int flags = MSG_NOSIGNAL;
    if (n == 1) {
        const temporary_buffer& b = _sendq.front();
        io_uring_prep_send(sqe, _fd, b.get(), b.size(), flags);
        _in_flight_bytes = b.size();
    } else {
        size_t bytes = 0;
        for (size_t i = 0; i < n; ++i) {
            const temporary_buffer& b = _sendq[i];
            vec->iov[i].iov_base = const_cast<char*>(b.get());
            vec->iov[i].iov_len = b.size();
            bytes += b.size();
        }
        vec->msg = msghdr{};
        vec->msg.msg_iov = vec->iov;
        vec->msg.msg_iovlen = n;
        io_uring_prep_sendmsg(sqe, _fd, &vec->msg, flags);
        _in_flight_bytes = bytes;
        _vec = vec;
        ++st.vectored_sends;
    }
    io_uring_sqe_set_data(sqe, static_cast<io_completion*>(&_send_c));
    _send_in_flight = true;
    ++st.sends;
}

void connection::on_send(int result, uint32_t) noexcept {
    _send_in_flight = false;
    if (_vec) {
        give_back(std::exchange(_vec, nullptr));
    }
    if (_send_error) {
        // Aborted while this send was in flight: its buffers may go now.
        _sendq.clear();
        _send_queued = 0;
    } else if (result <= 0) {
        int err = result < 0 ? -result : EPIPE;
        send_failed(std::make_exception_ptr(make_error(err, "send", _peer)));
    } else {
        size_t done = size_t(result);
        auto& st = local_stats();
        st.send_bytes += done;
        if (done < _in_flight_bytes) {
            ++st.short_sends;
        }
        _send_queued -= done;
        while (done > 0) {
            temporary_buffer& front = _sendq.front();
            if (front.size() <= done) {
                done -= front.size();
                _sendq.pop_front();
            } else {
                front.trim_front(done);
                done = 0;
            }
        }
        if (!_sendq.empty()) {
            schedule_send();
        } else {
            output_drained();
        }
        if (_put_waiter && _send_queued <= _send_window) {
            _put_waiter->set_value();
            _put_waiter.reset();
        }
    }
    maybe_destroy();
}

void connection::send_failed(std::exception_ptr ex) noexcept {
    if (!_send_error) {
        _send_error = std::move(ex);
    }
    if (!_send_in_flight) {
        // The kernel reads none of them: drop the queue now (else on_send does).
        _sendq.clear();
        _send_queued = 0;
    }
    if (_put_waiter) {
        _put_waiter->set_exception(_send_error);
        _put_waiter.reset();
    }
    if (_drain_waiter) {
        _drain_waiter->set_exception(_send_error);
        _drain_waiter.reset();
    }
}

void connection::output_drained() noexcept {
    if (_shutdown_when_drained) {
        do_shutdown_output();
    }
    if (_drain_waiter) {
        _drain_waiter->set_value();
        _drain_waiter.reset();
    }
}

void connection::do_shutdown_output() noexcept {
    if (!_shut_wr) {
        _shut_wr = true;
        ::shutdown(_fd, SHUT_WR);
    }
}

future<> connection::flush() {
    // Everything put is already the transport's: the queue is being sent in the background.
    if (_send_error) {
        return make_exception_future<>(_send_error);
    }
    return make_ready_future<>();
}

future<> connection::close_output() {
    if (_send_error) {
        return make_exception_future<>(_send_error);
    }
    _output_closed = true;
    if (!_send_in_flight && _sendq.empty()) {
        do_shutdown_output();
        return make_ready_future<>();
    }
    _shutdown_when_drained = true;
    if (_drain_waiter) {
        return make_exception_future<>(std::logic_error("output_stream: close() called twice"));
    }
    _drain_waiter.emplace();
    return _drain_waiter->get_future();
}

void connection::shutdown_output() {
    _output_closed = true;
    if (!_send_in_flight && _sendq.empty()) {
        do_shutdown_output();
    } else {
        _shutdown_when_drained = true;
    }
}

// --- abort

void connection::abort() noexcept {
    if (std::exchange(_aborted, true)) {
        return;
    }
    ++local_stats().aborts;
    // A reset instead of a FIN when the fd is closed (once the kernel holds no request of
    // ours), and unsent bytes are dropped rather than lingering for a peer that may never read.
    linger lg{1, 0};
    (void)::setsockopt(_fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    auto error = std::make_exception_ptr(make_error(ECONNABORTED, "abort", _peer));
    // Receiving: drop what is queued, fail the pending read and every later one.
    _recvq.clear();
    _unread = 0;
    _input_ended = true; // a receive still armed delivers nothing more
    recv_failed(error);
    cancel_recv();
    if (_waiting_buffers) {
        _ring->cancel_wait(*this);
        _waiting_buffers = false;
        _ring = nullptr;
    }
    // Sending: fail the waiting put/close and later ones; a send the kernel holds is cancelled
    // and its buffers are freed by its completion.
    _output_closed = true;
    _shutdown_when_drained = false;
    send_failed(error);
    if (_send_in_flight) {
        try {
            _canceller.cancel(&_send_c);
        } catch (...) {
            // No SQE: the shutdown below ends the blocked send as well.
        }
    }
    // Wakes a send the kernel has parked on a full socket buffer (it fails with EPIPE).
    _shut_wr = true;
    ::shutdown(_fd, SHUT_RDWR);
    maybe_destroy();
}

// --- options and addresses

int connection::setsockopt_or_throw(int level, int name, int value, const char* what) {
    if (::setsockopt(_fd, level, name, &value, sizeof(value)) < 0) {
        throw make_error(errno, what, _peer);
    }
    return value;
}

int connection::getsockopt_int(int level, int name) const {
    int value = 0;
    socklen_t len = sizeof(value);
    if (::getsockopt(_fd, level, name, &value, &len) < 0) {
        throw make_error(errno, "getsockopt", _peer);
    }
    return value;
}

void connection::set_nodelay(bool on) {
    setsockopt_or_throw(IPPROTO_TCP, TCP_NODELAY, on ? 1 : 0, "setsockopt TCP_NODELAY");
}

bool connection::get_nodelay() const {
    return getsockopt_int(IPPROTO_TCP, TCP_NODELAY) != 0;
}

void connection::set_keepalive(bool on) {
    setsockopt_or_throw(SOL_SOCKET, SO_KEEPALIVE, on ? 1 : 0, "setsockopt SO_KEEPALIVE");
}

bool connection::get_keepalive() const {
    return getsockopt_int(SOL_SOCKET, SO_KEEPALIVE) != 0;
}

socket_address connection::local_address() const {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (::getsockname(_fd, reinterpret_cast<sockaddr*>(&ss), &len) < 0) {
        throw make_error(errno, "getsockname", _peer);
    }
    return socket_address(reinterpret_cast<sockaddr*>(&ss), len);
}

} // namespace shoal::net::tcp::internal
