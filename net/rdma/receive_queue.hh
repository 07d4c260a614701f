#pragma once

#include "net/rdma/completion.hh"
#include "net/rdma/memory_pool.hh"

#include <cstdint>
#include <memory>

#include <infiniband/verbs.h>

namespace shoal::net::rdma::internal {

/// Where the shared receive queue hands each received message.
class receive_sink {
public:
    /// A receive completed (any status). The sink may take `buf` (the data stays with the
    /// reader, zero-copy); if it leaves it, the receive queue reposts or frees it.
    virtual void on_receive(const ibv_wc& wc, buffer& buf) noexcept = 0;

protected:
    ~receive_sink() = default;
};

/// Receives posted over all of a shard's SRQs, bounded: every CQ keeps room for `limit`
/// receive completions (they may all complete on one CQ), so the SRQs of all size classes
/// together never post more.
struct receive_budget {
    unsigned limit = 0;  ///< receives the shard's SRQs may hold together
    unsigned posted = 0; ///< receives posted in them now
};

/// One of a shard's shared receive queues (SRQ), one per receive size class: every connection
/// of that class receives into it, all buffers the same size. It enforces the invariant behind
/// credit-based flow control: receives posted >= receives promised to peers ("committed"), so
/// a peer that sends only with credits never finds the queue empty (no RNR; QPs use
/// rnr_retry = 0).
class shared_receive_queue {
public:
    /// Creates an SRQ of `max_wr` receives of `buffer_size` bytes on `pd`, keeping `slack`
    /// receives posted beyond those promised; what it posts counts against `budget` (shared
    /// with the shard's other SRQs, outliving this one). Throws rdma_error.
    shared_receive_queue(ibv_pd* pd, memory_pool& pool, unsigned max_wr, size_t buffer_size,
                         receive_sink& sink, unsigned slack, receive_budget& budget);
    ~shared_receive_queue();
    shared_receive_queue(const shared_receive_queue&) = delete;
    shared_receive_queue& operator=(const shared_receive_queue&) = delete;

    /// The verbs SRQ.
    ibv_srq* srq() const noexcept { return _srq; }
    /// Size of every receive buffer.
    size_t buffer_size() const noexcept { return _buffer_size; }
    /// Receives the SRQ holds at most.
    unsigned capacity() const noexcept { return _max_wr; }
    /// Receives posted now.
    unsigned posted() const noexcept { return _posted; }
    /// Receives promised to peers.
    unsigned committed() const noexcept { return _committed; }

    /// Promises up to `n` more receives to a peer, posting new buffers as needed; returns how
    /// many were promised (fewer when the pool or the queue is full). `optional` promises are
    /// refused above the pool's high watermark.
    unsigned reserve(unsigned n, bool optional = false) noexcept;
    /// Withdraws `n` promises that will not be used (a connection went away).
    void release(unsigned n) noexcept;
    /// A promised receive was consumed by a message.
    void consumed() noexcept { --_committed; }
    /// Receives kept posted beyond the promised ones: what a peer sending without credits can
    /// consume before it is caught without honest peers finding the queue empty.
    unsigned slack() const noexcept { return _slack; }
    /// Asks the device for IBV_EVENT_SRQ_LIMIT_REACHED when fewer than half the slack is
    /// posted (ignored where the device cannot).
    void arm_limit() noexcept;
    /// After the limit event: posts up to promised + slack again and re-arms the limit.
    void refill() noexcept;
    /// Connections and listeners of this size class (the shard frees a class nobody uses).
    unsigned users() const noexcept { return _users; }
    /// Counts one more connection or listener of the class.
    void attach() noexcept { ++_users; }
    /// Counts one fewer.
    void detach() noexcept { _users -= _users > 0; }

private:
    struct slot final : completion_handler {
        shared_receive_queue* q = nullptr;
        slot* next_free = nullptr;
        buffer buf;
        void complete(const ibv_wc& wc) noexcept override { q->on_complete(*this, wc); }
    };
    void on_complete(slot& s, const ibv_wc& wc) noexcept;
    unsigned post_new(unsigned n, bool optional) noexcept;
    bool post(slot& s) noexcept;

    ibv_srq* _srq = nullptr;
    memory_pool& _pool;
    unsigned _max_wr;
    size_t _buffer_size;
    receive_sink& _sink;
    receive_budget& _budget;
    std::unique_ptr<slot[]> _slots;
    slot* _free = nullptr;
    unsigned _posted = 0;
    unsigned _committed = 0;
    unsigned _slack;
    unsigned _users = 0;
    bool _limit_supported = true;
};

} // namespace shoal::net::rdma::internal
