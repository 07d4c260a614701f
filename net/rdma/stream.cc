// The stream transport over a connection, and the public connection/listener API.
#include "net/rdma/stream.hh"

#include "net/rdma/connection_impl.hh"
#include "net/rdma/connection_manager.hh"
#include "net/rdma/context.hh"
#include "net/rdma/error.hh"
#include "net/rdma/fault_injector.hh"

#include <cassert>
#include <cstring>
#include <stdexcept>
#include <utility>

#include <arpa/inet.h>

namespace shoal::net::rdma {

namespace internal {

// --- connection_impl: stream side

size_t connection_impl::stream_piece_size() const noexcept {
    size_t peer = _peer.recv_buffer_size ? _peer.recv_buffer_size : 4096;
    return _ctx && !_resources_gone ? std::min(peer, _ctx->pool().max_buffer_size()) : peer;
}

void connection_impl::deliver_rx(net::temporary_buffer buf) noexcept {
    if (rx_waiting() && _rx.empty()) {
        consumed(1);
        wake_reader(std::move(buf));
        return;
    }
    _rx.push_back(std::move(buf));
}

void connection_impl::wake_reader(net::temporary_buffer buf) noexcept {
    if (_rx_waiter) {
        std::exchange(_rx_waiter, std::nullopt)->set_value(std::move(buf));
    } else if (_msg_waiter) {
        auto pr = std::move(*std::exchange(_msg_waiter, std::nullopt));
        if (buf.empty()) {
            pr.set_value(std::nullopt);
        } else {
            pr.set_value(std::move(buf));
        }
    } else if (_msg_receiver) {
        net::message_receiver* r = std::exchange(_msg_receiver, nullptr);
        if (buf.empty()) {
            r->on_message(std::nullopt);
        } else {
            r->on_message(std::move(buf));
        }
    }
}

void connection_impl::fail_reader(const std::exception_ptr& ex) noexcept {
    if (_rx_waiter) {
        std::exchange(_rx_waiter, std::nullopt)->set_exception(ex);
    } else if (_msg_waiter) {
        std::exchange(_msg_waiter, std::nullopt)->set_exception(ex);
    } else if (_msg_receiver) {
        std::exchange(_msg_receiver, nullptr)->on_receive_error(ex);
    }
}

future<net::temporary_buffer> connection_impl::stream_get() {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    if (!_rx.empty()) {
        net::temporary_buffer b = std::move(_rx.front());
        _rx.pop_front();
        consumed(1);
        return make_ready_future<net::temporary_buffer>(std::move(b));
    }
    if (_peer_fin || _input_closed) {
        if (_eof_flag) {
            *_eof_flag = true;
        }
        return make_ready_future<net::temporary_buffer>();
    }
    if (_state != state::established && _state != state::connecting) {
        return make_exception_future<net::temporary_buffer>(_error ? _error : closed_error());
    }
    if (rx_waiting()) {
        return make_exception_future<net::temporary_buffer>(
            std::logic_error("RDMA stream: read while another read is pending"));
    }
    _rx_waiter.emplace();
    return _rx_waiter->get_future();
}

future<std::optional<net::temporary_buffer>> connection_impl::message_get() {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    if (message_read_waits()) {
        _msg_waiter.emplace();
        return _msg_waiter->get_future();
    }
    // Not a read that waits: `stream_get` resolves it at once, so `then` runs here.
    return stream_get().then([](net::temporary_buffer b) -> std::optional<net::temporary_buffer> {
        // A zero-length SEND is never delivered (nor sent): empty is the end of stream.
        if (b.empty()) {
            return std::nullopt;
        }
        return std::optional<net::temporary_buffer>(std::move(b));
    });
}

bool connection_impl::message_receive_into(net::message_receiver& r) {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    if (message_read_waits()) {
        _msg_receiver = &r;
        return false;
    }
    // Every other case is answered at once by `message_get` (a message is queued, the input
    // ended, the connection failed, or another read waits).
    future<std::optional<net::temporary_buffer>> f = message_get();
    assert(f.available());
    if (f.failed()) {
        r.on_receive_error(f.get_exception());
    } else {
        r.on_message(f.get());
    }
    return true;
}

void connection_impl::stream_abort_read(const std::exception_ptr& ex) noexcept {
    fail_reader(ex);
}

void connection_impl::stream_shutdown_input() noexcept {
    _input_closed = true;
    unsigned n = unsigned(_rx.size());
    _rx.clear();
    if (n) {
        consumed(n);
    }
    if (rx_waiting()) {
        if (_eof_flag) {
            *_eof_flag = true;
        }
        wake_reader(net::temporary_buffer());
    }
}

future<> connection_impl::stream_put(net::temporary_buffer buf) {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    if (!usable()) {
        return make_exception_future<>(_error ? _error : closed_error());
    }
    if (_fin_requested) {
        return make_exception_future<>(std::logic_error("RDMA stream: write after close"));
    }
    if (buf.empty()) {
        return make_ready_future<>();
    }
    _tx_bytes += buf.size();
    _tx.push_back(std::move(buf));
    transmit();
    if (_tx_bytes <= _opts.send_buffer_limit) {
        return make_ready_future<>();
    }
    _put_waiters.emplace_back();
    return _put_waiters.back().get_future();
}

future<> connection_impl::stream_put_many(std::span<net::temporary_buffer> bufs) {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    if (!usable()) {
        return make_exception_future<>(_error ? _error : closed_error());
    }
    if (_fin_requested) {
        return make_exception_future<>(std::logic_error("RDMA stream: write after close"));
    }
    // All queued before transmitting, so the pieces can leave together (one SEND, one entry
    // each) instead of the first one alone.
    for (auto& b : bufs) {
        if (!b.empty()) {
            _tx_bytes += b.size();
            _tx.push_back(std::move(b));
        } else {
            b.reset();
        }
    }
    transmit();
    if (_tx_bytes <= _opts.send_buffer_limit) {
        return make_ready_future<>();
    }
    _put_waiters.emplace_back();
    return _put_waiters.back().get_future();
}

net::temporary_buffer connection_impl::stream_allocate(size_t size) {
    if (_ctx && !_resources_gone) {
        // Optional: above the pool's high watermark the memory is left to receives, and the
        // stream gathers on the heap (its bytes are then copied into the pool when sent).
        if (buffer b = _ctx->pool().try_allocate(size, true)) {
            return std::move(b).into_temporary_buffer(size);
        }
    }
    return net::temporary_buffer(size);
}

future<> connection_impl::stream_flush() {
    // What was put is the transport's now: queued bytes leave as credits allow (bounded by
    // send_buffer_limit through `put`), like bytes in a kernel socket buffer. Not waiting here
    // is what lets small writes that meet a full send window coalesce into one message.
    if (tx_empty() || usable()) {
        return make_ready_future<>();
    }
    return make_exception_future<>(_error ? _error : closed_error());
}

future<> connection_impl::stream_close_output() {
    if (_fin_done_ok) {
        return make_ready_future<>();
    }
    if (!usable()) {
        // The peer ended its side and left: nothing of ours is lost by not telling it we end.
        if (_peer_fin && tx_empty()) {
            return make_ready_future<>();
        }
        return make_exception_future<>(_error ? _error : closed_error());
    }
    _fin_requested = true;
    if (!_fin_done) {
        _fin_done.emplace();
    } else {
        return make_exception_future<>(std::logic_error("RDMA stream: close while another close is pending"));
    }
    auto f = _fin_done->get_future();
    transmit();
    return f;
}

void connection_impl::stream_abort() noexcept {
    if (_state == state::closing || _state == state::closed) {
        return;
    }
    // Unread messages go too: a read after an abort fails instead of finding old data.
    _rx.clear();
    _credits.drop_unconsumed();
    close(std::make_exception_ptr(
        connection_closed("RDMA connection to " + _peer_addr.to_string() + " was aborted by this side")));
}

void connection_impl::fail_receive_waiters() noexcept {
    std::exception_ptr ex = _error ? _error : closed_error();
    if (rx_waiting()) {
        if (_peer_fin && _rx.empty()) {
            if (_eof_flag) {
                *_eof_flag = true;
            }
            wake_reader(net::temporary_buffer());
        } else {
            fail_reader(ex);
        }
    }
    if (_imm_waiter) {
        auto pr = std::move(*_imm_waiter);
        _imm_waiter.reset();
        pr.set_exception(ex);
    }
    fail_tag_waiters(ex);
}

void connection_impl::fail_send_waiters() noexcept {
    std::exception_ptr ex = _error ? _error : closed_error();
    for (auto& w : _put_waiters) {
        w.set_exception(ex);
    }
    _put_waiters.clear();
    if (_fin_done && !_fin_posted) {
        auto pr = std::move(*_fin_done);
        _fin_done.reset();
        pr.set_exception(ex);
    }
    _ring.fail_waiters(ex);
}

void connection_impl::transmit() noexcept {
    if (!usable()) {
        return;
    }
    bool stalled = false;
    while (!tx_empty()) {
        if (_credits.free_credits() == 0) {
            if (!internal::inject(fault::ignore_credits)) {
                stalled = true;
                break;
            }
            _credits.forge_send_credit(); // a hostile peer's send: the credit it takes was never granted
        }
        if (free_slots() <= 1 || !(_msgs.empty() ? build_data_message() : build_message())) {
            break;
        }
    }
    if (stalled) {
        ++_stats.credit_stalls;
    }
    if (tx_empty() && _fin_requested && !_fin_posted && _credits.free_credits() > 0 && free_slots() > 1) {
        send_slot& s = _ring.next_slot();
        s.kind = send_slot::op::fin;
        s.signaled = true;
        s.wr.opcode = IBV_WR_SEND_WITH_IMM;
        s.wr.num_sge = 0;
        s.wr.sg_list = nullptr;
        s.wr.imm_data = htonl(
            encode_imm({msg_kind::fin, _credits.take_credit_returns(max_imm_credits), take_ctrl_returns()}));
        _credits.use_send_credit();
        _fin_posted = true;
        append(s);
    }
    if (_tx_bytes <= _opts.send_buffer_limit && !_put_waiters.empty()) {
        for (auto& w : _put_waiters) {
            w.set_value();
        }
        _put_waiters.clear();
    }
}

bool connection_impl::build_data_message() noexcept {
    const size_t limit = stream_piece_size();
    memory_pool& pool = _ctx->pool();
    // The candidate message: up to _max_sge pieces from the front of the queue, at most `limit`
    // bytes (the peer's receive size: a bigger message would break its QP).
    std::array<uint32_t, max_send_gather> lkeys{};
    unsigned k = 0;
    unsigned registered = 0; // leading pieces in registered memory
    size_t n = 0;
    size_t registered_bytes = 0;
    for (auto it = _tx.begin(); it != _tx.end() && k < _max_sge && n < limit; ++it, ++k) {
        size_t take = std::min(it->size(), limit - n);
        if (registered == k) {
            if (auto l = pool.lkey_of(it->get(), take)) {
                lkeys[k] = *l;
                ++registered;
                registered_bytes += take;
            }
        }
        n += take;
    }
    // `complete`: the pieces are all that is queued, or a full message. Otherwise (many small
    // pieces backed up behind a full send window) they are coalesced into one pool buffer.
    const bool complete = n == _tx_bytes || n >= limit;
    send_slot& s = _ring.next_slot();
    s.kind = send_slot::op::stream;
    s.wr.opcode = IBV_WR_SEND_WITH_IMM;
    unsigned take_pieces = 0;
    if (n <= _max_inline && complete) {
        // Small: inline, straight from the caller's memory (the post copies it).
        take_pieces = k;
        s.wr.send_flags |= IBV_SEND_INLINE;
        ++_stats.inline_sends;
    } else if (registered == k && complete) {
        // Registered memory (gathered by output_stream into the pool, or a received buffer
        // echoed back): sent in place, every piece its own scatter-gather entry.
        take_pieces = k;
        ++_stats.zero_copy_sends;
    } else if (registered > 0 && registered_bytes > _max_inline) {
        // The registered pieces in front go alone, in place.
        take_pieces = registered;
        ++_stats.zero_copy_sends;
    } else if (_tx.front().size() <= _max_inline && _tx.size() > 1 &&
               _tx.front().size() + _tx[1].size() > _max_inline) {
        // A small piece that shares no inline message with the next one: inline, alone.
        take_pieces = 1;
        lkeys[0] = 0;
        s.wr.send_flags |= IBV_SEND_INLINE;
        ++_stats.inline_sends;
    }
    if (take_pieces > 0) {
        n = 0;
        for (unsigned i = 0; i < take_pieces; ++i) {
            net::temporary_buffer& front = _tx.front();
            size_t m = std::min(front.size(), limit - n);
            s.sges[i] = ibv_sge{reinterpret_cast<uintptr_t>(front.get()), uint32_t(m),
                                (s.wr.send_flags & IBV_SEND_INLINE) ? 0 : lkeys[i]};
            if (m == front.size()) {
                s.held.hold(std::move(front));
                _tx.pop_front();
            } else {
                s.held.hold(front.share(0, m));
                front.trim_front(m);
            }
            n += m;
        }
        s.wr.num_sge = int(take_pieces);
        if (take_pieces > 1) {
            ++_stats.gathered_sends;
        }
    } else {
        // Copied into a pool buffer: small pieces coalesced, or memory that is not registered.
        n = std::min(_tx_bytes, limit);
        s.copy = pool.try_allocate(n);
        if (!s.copy) {
            starve_tx();
            return false;
        }
        size_t off = 0;
        while (off < n) {
            net::temporary_buffer& b = _tx.front();
            size_t m = std::min(b.size(), n - off);
            std::memcpy(s.copy.data() + off, b.get(), m);
            off += m;
            if (m == b.size()) {
                _tx.pop_front();
            } else {
                b.trim_front(m);
            }
        }
        net::internal::count_copy(n);
        s.sge = ibv_sge{reinterpret_cast<uintptr_t>(s.copy.data()), uint32_t(n), s.copy.lkey()};
        if (n <= _max_inline) {
            s.wr.send_flags |= IBV_SEND_INLINE;
            ++_stats.inline_sends;
        }
        ++_stats.copied_sends;
    }
    _tx_bytes -= n;
    append_data_message(s, n);
    if (n >= 16384) {
        // Large piece: post it now so the copy of the next piece overlaps its transmission.
        post_pending();
    }
    return true;
}

void connection_impl::starve_tx() noexcept {
    _tx_starved = true;
    if (!_starved) {
        _starved = true;
        _ctx->mark_starved(this); // retried when memory comes back
    }
}

// --- stream objects

stream_source::stream_source(std::shared_ptr<connection_ref> ref)
    : _ref(std::move(ref)) {
    _ref->impl()._eof_flag = &_eof;
}

stream_source::~stream_source() {
    if (_ref->impl()._eof_flag == &_eof) {
        _ref->impl()._eof_flag = nullptr;
    }
}

future<net::temporary_buffer> stream_source::get() {
    _read_abort = {};
    return _ref->impl().stream_get();
}

future<net::temporary_buffer> stream_source::get(abort_source& as) {
    _read_abort = {};
    if (as.abort_requested()) {
        return make_exception_future<net::temporary_buffer>(as.abort_exception());
    }
    auto f = _ref->impl().stream_get();
    if (!f.available()) {
        _read_abort =
            as.subscribe([this](const std::exception_ptr& ex) { _ref->impl().stream_abort_read(ex); });
    }
    return f;
}

future<> stream_source::close() {
    _ref->impl().stream_shutdown_input();
    return make_ready_future<>();
}

future<> stream_sink::put(net::temporary_buffer buf) {
    return _ref->impl().stream_put(std::move(buf));
}

future<> stream_sink::put_many(std::span<net::temporary_buffer> bufs) {
    return _ref->impl().stream_put_many(bufs);
}

net::temporary_buffer stream_sink::allocate_buffer(size_t size) {
    return _ref->impl().stream_allocate(size);
}

future<> stream_sink::flush() {
    return _ref->impl().stream_flush();
}

future<> stream_sink::close() {
    return _ref->impl().stream_close_output();
}

size_t stream_sink::buffer_size_hint() const noexcept {
    return _ref->impl().stream_piece_size();
}

std::unique_ptr<net::data_source_impl> stream_socket::source() {
    if (std::exchange(_source_taken, true)) {
        throw std::logic_error("connected_socket::input() called twice");
    }
    return std::make_unique<stream_source>(_ref);
}

std::unique_ptr<net::data_sink_impl> stream_socket::sink() {
    if (std::exchange(_sink_taken, true)) {
        throw std::logic_error("connected_socket::output() called twice");
    }
    return std::make_unique<stream_sink>(_ref);
}

void stream_socket::shutdown_input() {
    _ref->impl().stream_shutdown_input();
}

void stream_socket::shutdown_output() {
    (void)_ref->impl().stream_close_output().handle_exception([](std::exception_ptr) {});
}

void stream_socket::abort() noexcept {
    _ref->impl().stream_abort();
}

net::socket_address stream_socket::local_address() const {
    return _ref->impl().local_address();
}

net::socket_address stream_socket::peer_address() const {
    return _ref->impl().peer_address();
}

future<net::accept_result> stream_server_socket::accept() {
    return _l.accept().then([](connection c) {
        auto addr = c.peer_address();
        return net::accept_result{c.socket(), addr};
    });
}

void connection_impl::append_data_message(send_slot& s, size_t n) noexcept {
    s.wr.imm_data = htonl(
        encode_imm({msg_kind::data, _credits.take_credit_returns(max_imm_credits), take_ctrl_returns()}));
    _credits.use_send_credit();
    ++_stats.messages_sent;
    _stats.bytes_sent += n;
    append(s);
}

} // namespace internal

// --- public API

net::connected_socket connection::socket() {
    auto& c = impl();
    if (c._stream_taken) {
        throw std::logic_error("connection::socket(): the SEND/RECV path of this connection was already "
                               "taken (socket() or messages())");
    }
    c._stream_taken = true;
    return net::connected_socket(std::make_shared<internal::stream_socket>(_ref));
}

void connection::close() {
    impl().close(nullptr);
}

listener::listener() noexcept = default;
listener::listener(std::unique_ptr<internal::acceptor> a) noexcept
    : _a(std::move(a)) {}
listener::listener(listener&&) noexcept = default;
listener& listener::operator=(listener&&) noexcept = default;
listener::~listener() = default;

future<connection> listener::accept() {
    if (!_a) {
        return make_exception_future<connection>(std::logic_error("rdma::listener::accept: not listening"));
    }
    return _a->accept().then(
        [](std::shared_ptr<internal::connection_ref> ref) { return connection(std::move(ref)); });
}

future<connection> listener::accept(abort_source& as) {
    if (!_a) {
        return make_exception_future<connection>(std::logic_error("rdma::listener::accept: not listening"));
    }
    return _a->accept(&as).then(
        [](std::shared_ptr<internal::connection_ref> ref) { return connection(std::move(ref)); });
}

void listener::abort_accept() {
    if (_a) {
        _a->abort_accept();
    }
}

net::socket_address listener::local_address() const {
    if (!_a) {
        throw std::logic_error("rdma::listener::local_address: not listening");
    }
    return _a->local_address();
}

listener listen_rc(const net::socket_address& addr, const listen_options& opts) {
    shard_context& ctx = shard_context::local();
    return listener(internal::listen_on(addr, opts.connection.value_or(ctx.opts().connection), opts.backlog,
                                        opts.accept_backlog));
}

future<connection> connect_rc(const net::socket_address& addr, const connection_options& opts) {
    return internal::connect_to(addr, opts).then([](std::shared_ptr<internal::connection_ref> ref) {
        return connection(std::move(ref));
    });
}

future<connection> connect_rc(const net::socket_address& addr, const connection_options& opts,
                              abort_source& as) {
    return internal::connect_to(addr, opts, &as).then([](std::shared_ptr<internal::connection_ref> ref) {
        return connection(std::move(ref));
    });
}

future<connection> connect_rc(const net::socket_address& addr) {
    shard_context* ctx = shard_context::local_or_null();
    return connect_rc(addr, ctx ? ctx->opts().connection : connection_options{});
}

net::server_socket listen(const net::socket_address& addr, const listen_options& opts) {
    return net::server_socket(std::make_unique<internal::stream_server_socket>(listen_rc(addr, opts)));
}

future<net::connected_socket> connect(const net::socket_address& addr, const connection_options& opts) {
    return connect_rc(addr, opts).then([](connection c) { return c.socket(); });
}

future<net::connected_socket> connect(const net::socket_address& addr) {
    return connect_rc(addr).then([](connection c) { return c.socket(); });
}

future<net::connected_socket> connect(const net::socket_address& addr, const connection_options& opts,
                                      abort_source& as) {
    return connect_rc(addr, opts, as).then([](connection c) { return c.socket(); });
}

} // namespace shoal::net::rdma
