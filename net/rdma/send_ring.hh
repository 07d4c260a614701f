#pragma once

#include "core/future.hh"
#include "net/rdma/completion.hh"
#include "net/rdma/memory_pool.hh"
#include "net/rdma/op_completion.hh"
#include "net/temporary_buffer.hh"

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>

#include <infiniband/verbs.h>

namespace shoal::net::rdma::internal {

class connection_impl;
struct window_state;

/// Most scatter-gather entries a send of a connection uses (clamped to the device's limit):
/// a message's pieces (e.g. a header and a payload) leave in one SEND without being joined.
inline constexpr unsigned max_send_gather = 4;

/// The caller's buffers a send reads in place, one per scatter-gather entry; released when
/// the send completed (or, inline, once it is posted).
struct held_buffers {
    std::array<net::temporary_buffer, max_send_gather> bufs;
    unsigned count = 0;
    /// Keeps `b` until the send is done.
    void hold(net::temporary_buffer b) noexcept { bufs[count++] = std::move(b); }
    /// Drops every buffer held.
    void reset() noexcept {
        for (unsigned i = 0; i < count; ++i) {
            bufs[i].reset();
        }
        count = 0;
    }
    /// True when it holds a buffer.
    explicit operator bool() const noexcept { return count != 0; }
};

/// One send work request and what it holds until it completes. Its address is the request's
/// wr_id; a signaled completion retires it and every unsignaled request posted before it.
struct send_slot final : completion_handler {
    enum class op : uint8_t {
        free,
        stream,
        ctrl,
        fin,
        read,
        write,
        write_imm,
        fetch_add,
        compare_swap,
        bind_window,
        invalidate_window
    };
    connection_impl* conn = nullptr;
    uint64_t seq = 0;
    op kind = op::free;
    bool signaled = false;
    ibv_send_wr wr{};
    std::array<ibv_sge, max_send_gather> sges{};
    ibv_sge& sge = sges[0];               // the first entry (the only one of one-sided operations)
    buffer copy;                          // pool copy of stream bytes
    held_buffers held;                    // caller memory sent in place
    promise<> done;                       // READ / WRITE / WRITE_WITH_IMM / window bind and invalidate
    op_completion* notify = nullptr;      // READ / WRITE issued with an op_completion (instead of `done`)
    std::shared_ptr<window_state> window; // the window a bind or invalidate works on
    promise<uint64_t> value;              // atomics: the previous value
    /// Passes the completion to the connection, which retires this slot and the ones before it.
    void complete(const ibv_wc& wc) noexcept override;
};

/// A connection's send queue as the connection keeps it: a ring of slots in which
/// [tail, posted) are posted to the QP, [posted, head) are appended and wait, linked as one
/// list, for the connection's next post, and the rest are free. Every `signal_every`-th request
/// is signaled (a signaled completion retires every request before it). It also queues the
/// one-sided operations waiting for their turn, in call order, and counts the slots reserved for
/// those whose turn came. Plain bookkeeping without verbs calls: the connection fills, posts,
/// completes and retires the slots, and decides whose turn it is.
class send_ring {
public:
    /// `depth` slots of `conn` (at least 8), every `signal_every`-th request signaled (1 to
    /// half the depth).
    send_ring(connection_impl* conn, unsigned depth, unsigned signal_every)
        : _depth(std::max(8u, depth))
        , _signal_every(std::clamp(signal_every, 1u, _depth / 2))
        , _slots(std::make_unique<send_slot[]>(_depth)) {
        for (unsigned i = 0; i < _depth; ++i) {
            _slots[i].conn = conn;
        }
    }
    send_ring(const send_ring&) = delete;
    send_ring& operator=(const send_ring&) = delete;

    /// Its slots (the send queue's depth).
    unsigned depth() const noexcept { return _depth; }
    /// Every how many requests one is signaled.
    unsigned signal_every() const noexcept { return _signal_every; }

    // --- slots

    /// Send slots nobody holds: neither in use nor reserved for a one-sided operation whose
    /// turn came.
    unsigned free_slots() const noexcept {
        unsigned raw = unsigned(_depth - (_head - _tail));
        return raw > _reserved_slots ? raw - _reserved_slots : 0;
    }
    /// The next free slot, cleared (the caller checked there is one).
    [[gnu::always_inline]] send_slot& next_slot() noexcept {
        send_slot& s = _slots[_head % _depth];
        s.seq = _head;
        s.kind = send_slot::op::free;
        s.signaled = false;
        s.wr = ibv_send_wr{};
        s.wr.wr_id = wr_id_of(&s);
        s.wr.sg_list = &s.sge;
        s.wr.num_sge = 1;
        s.sge = ibv_sge{};
        return s;
    }
    /// Links `s` (filled, from `next_slot`) after the requests waiting to be posted; every
    /// `signal_every`-th request is signaled. Always inlined: it is on every operation's path.
    [[gnu::always_inline]] void link(send_slot& s) noexcept {
        if (!s.signaled && ++_unsignaled_run >= _signal_every) {
            s.signaled = true;
        }
        if (s.signaled) {
            s.wr.send_flags |= IBV_SEND_SIGNALED;
            _unsignaled_run = 0;
        }
        s.wr.next = nullptr;
        if (_head > _posted) {
            _slots[(_head - 1) % _depth].wr.next = &s.wr;
        }
        ++_head;
    }
    /// Signals `s` (appended, not posted yet) out of turn; the count to the next signaled
    /// request starts again.
    void signal(send_slot& s) noexcept {
        s.signaled = true;
        s.wr.send_flags |= IBV_SEND_SIGNALED;
        _unsignaled_run = 0;
    }
    /// The slot of sequence number `seq`.
    send_slot& at(uint64_t seq) noexcept { return _slots[seq % _depth]; }
    /// Sequence number of the next slot appended.
    uint64_t head() const noexcept { return _head; }
    /// Sequence number of the first appended slot not posted.
    uint64_t posted() const noexcept { return _posted; }
    /// Slots appended and not posted.
    unsigned unposted() const noexcept { return unsigned(_head - _posted); }
    /// The slots before `end` are posted.
    void set_posted(uint64_t end) noexcept { _posted = end; }
    /// Takes the oldest posted slot off the ring when its sequence number is at most `last`
    /// (null: none): a completion retires it.
    send_slot* retire_up_to(uint64_t last) noexcept {
        if (_tail > last || _tail >= _posted) {
            return nullptr;
        }
        return &_slots[_tail++ % _depth];
    }
    /// Takes the oldest posted slot off the ring (null: none), at teardown.
    send_slot* retire_oldest() noexcept { return _tail < _posted ? &_slots[_tail++ % _depth] : nullptr; }
    /// Takes the newest slot not posted off the ring (null: none), when it will not be posted.
    send_slot* unlink_newest() noexcept { return _head > _posted ? &_slots[--_head % _depth] : nullptr; }

    // --- one-sided operations waiting for their turn

    /// Whether an operation waits for its turn.
    bool has_waiters() const noexcept { return !_waiters.empty(); }
    /// Queues an operation (a WRITE_WITH_IMM: `needs_credit`); resolves when the connection
    /// wakes it (`wake_first`) or fails it.
    future<> queue_waiter(bool needs_credit) {
        _waiters.push_back(waiter{promise<>(), needs_credit});
        return _waiters.back().pr.get_future();
    }
    /// Whether the first waiting operation needs a credit (there is one).
    bool first_needs_credit() const noexcept { return _waiters.front().needs_credit; }
    /// Dequeues the first waiting operation with a slot reserved for it: its turn came.
    void wake_first() noexcept {
        ++_reserved_slots;
        _waiters.front().pr.set_value();
        _waiters.pop_front();
    }
    /// Dequeues the first waiting operation, failing it with `ex`.
    void fail_first(const std::exception_ptr& ex) noexcept {
        _waiters.front().pr.set_exception(ex);
        _waiters.pop_front();
    }
    /// Fails every waiting operation with `ex`.
    void fail_waiters(const std::exception_ptr& ex) noexcept {
        for (auto& w : _waiters) {
            w.pr.set_exception(ex);
        }
        _waiters.clear();
    }
    /// Slots reserved for woken operations that have not issued yet.
    unsigned reserved_slots() const noexcept { return _reserved_slots; }
    /// Gives back a slot `wake_first` reserved.
    void unreserve_slot() noexcept { --_reserved_slots; }
    /// A woken operation passed its turn's checks and issues in its next task.
    void turn_ready() noexcept { ++_turns_ready; }
    /// Takes the turn of the first ready operation, if one is ready (true): its reserved slot
    /// becomes the one it uses now (the caller gives the reservation back).
    bool take_ready_turn() noexcept {
        if (_turns_ready == 0) {
            return false;
        }
        --_turns_ready;
        return true;
    }

private:
    /// A one-sided operation waiting for its turn.
    struct waiter {
        promise<> pr;
        bool needs_credit;
    };

    unsigned _depth;
    unsigned _signal_every;
    std::unique_ptr<send_slot[]> _slots;
    uint64_t _head = 0;
    uint64_t _posted = 0;
    uint64_t _tail = 0;
    unsigned _unsignaled_run = 0;
    std::deque<waiter> _waiters;
    unsigned _reserved_slots = 0; // woken waiters that have not issued yet
    unsigned _turns_ready = 0;    // of which passed wait_turn and issue in their next task
};

} // namespace shoal::net::rdma::internal
