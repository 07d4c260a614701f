#pragma once

// Pieces shared by the TCP implementation files; not part of the public API.

#include "core/log.hh"
#include "core/reactor.hh"
#include "net/socket_address.hh"
#include "net/tcp/tcp.hh"
#include "net/temporary_buffer.hh"

#include <cstddef>
#include <cstdint>
#include <new>
#include <string_view>
#include <system_error>

namespace shoal::net::tcp::internal {

/// The logger of the TCP stack ("tcp").
extern logger tcp_log;

/// The calling shard's counters, writable.
stats& local_stats() noexcept;

/// `std::system_error` for `err` (a positive errno) whose message names the operation and the
/// address: "connect 127.0.0.1:1: Connection refused".
std::system_error make_error(int err, std::string_view op, const socket_address& addr);

/// Starts a connect; `as`, when not null, can cancel it (see tcp::connect).
future<connected_socket> start_connect(const socket_address& addr, const connect_options& opts,
                                       abort_source* as);

/// Applies TCP_NODELAY; returns errno or 0.
int set_nodelay(int fd, bool on) noexcept;

/// The io_uring user_data of a completion object, as cancellation keys it.
inline uint64_t user_data_of(io_completion* c) noexcept {
    return uint64_t(reinterpret_cast<uintptr_t>(c));
}

/// Cancels requests of an owner and counts each cancellation until its own completion has
/// arrived, so the owner (whose address is the key of the cancelled request) is not freed and
/// reused while a cancel request still waits in the submission queue. `Owner::cancel_done()`
/// runs after each.
template <typename Owner>
class canceller final : public io_completion {
public:
    /// Reports to `owner`, which must stay alive while cancellations are pending.
    explicit canceller(Owner& owner) noexcept
        : _owner(owner) {}
    /// Queues a cancellation of the request whose completion object is `target`.
    void cancel(io_completion* target) {
        io_uring_sqe* sqe = local_reactor().get_sqe();
        io_uring_prep_cancel64(sqe, user_data_of(target), 0);
        io_uring_sqe_set_data(sqe, static_cast<io_completion*>(this));
        ++_pending;
    }
    /// Cancellations whose completion has not arrived yet.
    unsigned pending() const noexcept { return _pending; }
    /// One cancellation completed: uncounts it and calls `Owner::cancel_done()`.
    void complete(int, uint32_t) noexcept override {
        --_pending;
        _owner.cancel_done();
    }

private:
    Owner& _owner;
    unsigned _pending = 0;
};

/// A FIFO of buffers (a connection's receive or send queue) that costs no memory while it has
/// never held anything: its slots are allocated on the first push, doubled when full, and kept
/// while they are few (`kept_slots`) so a connection that queues a buffer per request does not
/// allocate per request; more slots than that go back to the heap when the queue empties. One
/// shard; not copyable.
class buffer_queue {
public:
    /// Slots allocated at the first push.
    static constexpr uint32_t first_slots = 4;
    /// Slots an empty queue keeps; a larger array is freed when the queue empties.
    static constexpr uint32_t kept_slots = 8;

    buffer_queue() noexcept = default;
    buffer_queue(const buffer_queue&) = delete;
    buffer_queue& operator=(const buffer_queue&) = delete;
    ~buffer_queue() {
        clear();
        release_slots();
    }

    /// True when no buffer is queued.
    bool empty() const noexcept { return _size == 0; }
    /// Buffers queued.
    size_t size() const noexcept { return _size; }
    /// The oldest buffer; the queue must not be empty.
    temporary_buffer& front() noexcept { return _slots[_head]; }
    /// The `i`-th oldest buffer (`i < size()`).
    temporary_buffer& operator[](size_t i) noexcept { return _slots[(_head + i) & (_cap - 1)]; }
    /// Appends `b`; throws std::bad_alloc when the slots cannot grow (nothing is changed then).
    void push_back(temporary_buffer b) {
        if (_size == _cap) {
            grow();
        }
        new (&_slots[(_head + _size) & (_cap - 1)]) temporary_buffer(std::move(b));
        ++_size;
    }
    /// Drops the oldest buffer; the queue must not be empty.
    void pop_front() noexcept {
        _slots[_head].~temporary_buffer();
        _head = (_head + 1) & (_cap - 1);
        if (--_size == 0) {
            _head = 0;
            if (_cap > kept_slots) {
                release_slots();
            }
        }
    }
    /// Drops every buffer (the slots go back to the heap).
    void clear() noexcept {
        while (_size) {
            pop_front();
        }
        release_slots();
    }
    /// Bytes of heap memory the queue holds (its slots).
    size_t memory() const noexcept { return size_t(_cap) * sizeof(temporary_buffer); }

private:
    void grow() {
        uint32_t cap = _cap ? 2 * _cap : first_slots;
        auto* slots = static_cast<temporary_buffer*>(::operator new(cap * sizeof(temporary_buffer)));
        for (uint32_t i = 0; i < _size; ++i) {
            temporary_buffer& from = _slots[(_head + i) & (_cap - 1)];
            new (&slots[i]) temporary_buffer(std::move(from));
            from.~temporary_buffer();
        }
        ::operator delete(_slots);
        _slots = slots;
        _cap = cap;
        _head = 0;
    }
    void release_slots() noexcept {
        if (_size == 0 && _slots) {
            ::operator delete(_slots);
            _slots = nullptr;
            _cap = 0;
            _head = 0;
        }
    }

    temporary_buffer* _slots = nullptr;
    uint32_t _cap = 0;
    uint32_t _head = 0;
    uint32_t _size = 0;
};

} // namespace shoal::net::tcp::internal
