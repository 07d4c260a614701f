// The message API of a connection: one SEND per message over the stream's SEND/RECV path.
#include "net/rdma/message.hh"

#include "net/rdma/connection.hh"
#include "net/rdma/context.hh"
#include "net/rdma/error.hh"

#include <cstring>
#include <stdexcept>

#include <arpa/inet.h>

namespace shoal::net::rdma {

namespace internal {

future<> connection_impl::message_put(std::span<net::temporary_buffer> parts, size_t size) {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    if (!usable()) {
        return make_exception_future<>(_error ? _error : closed_error());
    }
    if (_fin_requested) {
        return make_exception_future<>(std::logic_error("RDMA messages: send after close"));
    }
    queued_message& m = _msgs.emplace_back();
    m.size = size;
    if (parts.size() > _max_sge) {
        // More pieces than a send has entries: joined into one buffer (registered when the
        // pool can spare it).
        buffer b = _ctx->pool().try_allocate(size);
        net::temporary_buffer joined =
            b ? std::move(b).into_temporary_buffer(size) : net::temporary_buffer(size);
        size_t off = 0;
        for (auto& p : parts) {
            std::memcpy(joined.get_write() + off, p.get(), p.size());
            off += p.size();
            p.reset();
        }
        net::internal::count_copy(size);
        m.parts[0] = std::move(joined);
        m.count = 1;
    } else {
        for (auto& p : parts) {
            if (!p.empty()) {
                m.parts[m.count++] = std::move(p);
            }
        }
    }
    _tx_bytes += size;
    transmit();
    if (_tx_bytes <= _opts.send_buffer_limit) {
        return make_ready_future<>();
    }
    _put_waiters.emplace_back();
    return _put_waiters.back().get_future();
}

bool connection_impl::build_message() noexcept {
    queued_message& m = _msgs.front();
    memory_pool& pool = _ctx->pool();
    send_slot& s = _ring.next_slot();
    s.kind = send_slot::op::stream;
    s.wr.opcode = IBV_WR_SEND_WITH_IMM;
    const bool inl = m.size <= _max_inline;
    bool copied = false;
    for (unsigned i = 0; i < m.count; ++i) {
        net::temporary_buffer& p = m.parts[i];
        uint32_t lkey = 0;
        if (!inl) {
            std::optional<uint32_t> l = pool.lkey_of(p.get(), p.size());
            if (!l) {
                // Not registered (a header on the heap): copied into a pool buffer of its own,
                // which then stays in the message if this send has to wait for memory.
                buffer b = pool.try_allocate(p.size());
                if (!b) {
                    starve_tx();
                    return false;
                }
                std::memcpy(b.data(), p.get(), p.size());
                net::internal::count_copy(p.size());
                lkey = b.lkey();
                p = std::move(b).into_temporary_buffer(p.size());
                copied = true;
            } else {
                lkey = *l;
            }
        }
        s.sges[i] = ibv_sge{reinterpret_cast<uintptr_t>(p.get()), uint32_t(p.size()), lkey};
    }
    for (unsigned i = 0; i < m.count; ++i) {
        s.held.hold(std::move(m.parts[i]));
    }
    s.wr.num_sge = int(m.count);
    if (inl) {
        s.wr.send_flags |= IBV_SEND_INLINE;
        ++_stats.inline_sends;
    } else if (copied) {
        ++_stats.copied_sends;
    } else {
        ++_stats.zero_copy_sends;
    }
    if (m.count > 1) {
        ++_stats.gathered_sends;
    }
    const size_t n = m.size;
    _msgs.pop_front();
    _tx_bytes -= n;
    append_data_message(s, n);
    return true;
}

// --- message_socket

future<> message_socket::send(std::span<net::temporary_buffer> parts) {
    connection_impl& c = _ref->impl();
    size_t n = 0;
    try {
        n = net::internal::checked_message_size(parts, c.stream_piece_size());
    } catch (...) {
        return make_exception_future<>(std::current_exception());
    }
    return c.message_put(parts, n);
}

future<std::optional<net::temporary_buffer>> message_socket::receive() {
    // Every SEND is one receive buffer: the stream's reads already keep message boundaries.
    return _ref->impl().message_get();
}

bool message_socket::receive_into(net::message_receiver& r) {
    return _ref->impl().message_receive_into(r);
}

size_t message_socket::max_message_size() const noexcept {
    return _ref->impl().stream_piece_size();
}

future<> message_socket::close() {
    return _ref->impl().stream_close_output();
}

void message_socket::abort() noexcept {
    _ref->impl().stream_abort();
}

net::socket_address message_socket::peer_address() const {
    return _ref->impl().peer_address();
}

} // namespace internal

net::message_connection connection::messages() {
    auto& c = impl();
    if (c._stream_taken) {
        throw std::logic_error(
            "connection::messages(): the SEND/RECV path of this connection was already taken (socket() or "
            "messages())");
    }
    c._stream_taken = true;
    return net::message_connection(std::make_unique<internal::message_socket>(_ref));
}

} // namespace shoal::net::rdma
