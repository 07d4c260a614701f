#pragma once

#include "core/fd_watcher.hh"
#include "core/future.hh"
#include "core/reactor.hh"

#include <cstdint>
#include <memory>
#include <vector>

#include <infiniband/verbs.h>

namespace shoal::net::rdma::internal {

/// Counters of a shard's completion queue and its wake-ups; read them on its shard.
struct cq_stats {
    uint64_t polls = 0;       ///< poll rounds (reactor polls and re-checks)
    uint64_t completions = 0; ///< completions dispatched
    uint64_t arms = 0;        ///< ibv_req_notify_cq calls (before the shard sleeps)
    uint64_t cq_events = 0;   ///< completion-channel events: the shard was woken by a completion
    uint64_t resizes = 0;     ///< times a CQ grew
    uint64_t cqs = 0;         ///< completion queues of the shard (another is made when all are full)
    uint64_t entries = 0;     ///< CQ entries over all of them
    uint64_t reserved = 0;    ///< of which reserved (receives and connections' send queues)
};

/// Work completions by opcode (successful ones; a failed completion's opcode is undefined) and
/// by status (all of them), counted as the poller dispatches them.
struct wc_counts {
    static constexpr unsigned slots = 32;
    uint64_t by_opcode[slots] = {}; ///< indexed by `opcode_index`
    uint64_t by_status[slots] = {}; ///< indexed by `ibv_wc_status` (the last slot: any larger one)

    /// The slot of an `ibv_wc_opcode`: send-side opcodes (0..15) as they are, receive-side ones
    /// (IBV_WC_RECV | k) at 16 + k.
    static constexpr unsigned opcode_index(unsigned op) noexcept { return ((op >> 3) & 16) | (op & 15); }
    /// Counts one completion.
    void count(const ibv_wc& wc) noexcept {
        unsigned st = wc.status < slots ? unsigned(wc.status) : slots - 1;
        ++by_status[st];
        if (st == IBV_WC_SUCCESS) {
            ++by_opcode[opcode_index(unsigned(wc.opcode))];
        }
    }
};

/// A shard's completion queues, their one completion channel and the reactor poller that drains
/// them. Each completion is dispatched to the `completion_handler` its `wr_id` points to.
///
/// A CQ never overflows: `reserve` hands out entries only up to its size (every CQ also keeps
/// `receive_entries` for the shared receive queue, whose receives may all complete on any one
/// CQ). When no CQ has room it grows one (up to the device's `max_cqe`), and when none can
/// grow it creates another on the same channel: a provider's cap on one CQ (rxe: 32,767
/// entries) does not cap the shard's connections. Polling walks the CQs in turn; with one CQ
/// (most shards) it costs what a single CQ did.
///
/// Before the reactor sleeps, `try_arm` requests a notification (`ibv_req_notify_cq`) on each
/// CQ not armed yet and polls once more, so a completion that raced the arming is not lost;
/// the channel's fd is watched by the shard's io_uring and its event ends the sleep.
class cq_poller final : public poller {
public:
    /// Work the owner does around each poll round (post queued sends, reclaim connections).
    class hooks {
    public:
        /// Before the CQs are polled; returns true if it did work.
        virtual bool before_poll() noexcept = 0;
        /// After the CQs were polled (and on every re-check); returns true if it did work.
        virtual bool after_poll() noexcept = 0;

    protected:
        ~hooks() = default;
    };

    /// Creates the channel and a first CQ of `entries` (at least `receive_entries` + 1), each CQ
    /// reserving `receive_entries`; no CQ grows past `max_entries` (0: no limit). Throws
    /// rdma_error.
    cq_poller(ibv_context* ctx, unsigned entries, unsigned receive_entries, unsigned max_entries,
              unsigned batch, hooks& h);
    ~cq_poller() override;
    cq_poller(const cq_poller&) = delete;
    cq_poller& operator=(const cq_poller&) = delete;

    /// Registers with the calling shard's reactor and starts watching the channel.
    void start();
    /// Unregisters and stops watching; resolves when io_uring has let go of the channel fd.
    future<> stop();

    /// The first completion queue.
    ibv_cq* cq() const noexcept { return _cqs.front().cq; }
    /// Completion queues in use.
    unsigned count() const noexcept { return unsigned(_cqs.size()); }
    /// CQ entries over all the CQs.
    unsigned capacity() const noexcept;
    /// Reserves `entries` (a connection's send queue depth) on a CQ with room, growing one or
    /// creating one when none has; returns that CQ, which the QP must use for sends and
    /// receives. Throws rdma_error when no CQ can be had (the reason from the device).
    ibv_cq* reserve(unsigned entries);
    /// Gives back what `reserve` took on `cq` (its QP is destroyed).
    void unreserve(ibv_cq* cq, unsigned entries) noexcept;
    /// Polls and dispatches until every CQ is empty; returns the completions handled.
    unsigned drain() noexcept;
    /// True while a completion is being dispatched (a handler runs).
    bool dispatching() const noexcept { return _polling > 0; }
    /// The poller's counters.
    cq_stats stats() const noexcept;
    /// Completions dispatched so far, by opcode and status.
    const wc_counts& completion_counts() const noexcept { return _wc_counts; }

    bool poll() override;
    bool try_arm() override;
    void disarm() override {}

private:
    struct queue {
        ibv_cq* cq = nullptr;
        unsigned reserved = 0;
        unsigned unacked = 0;
        bool armed = false;
    };
    ibv_cq* create(unsigned entries);
    unsigned poll_batch(queue& q) noexcept;
    void on_channel_readable() noexcept;
    void ack_events(queue& q) noexcept;

    ibv_context* _ctx;
    ibv_comp_channel* _channel = nullptr;
    std::vector<queue> _cqs;
    unsigned _receive_entries;
    unsigned _max_entries;
    unsigned _batch;
    hooks& _hooks;
    std::unique_ptr<fd_watcher> _watcher;
    std::vector<ibv_wc> _wcs;
    bool _registered = false;
    unsigned _polling = 0; // nesting depth of dispatch (drain from inside a handler)
    cq_stats _stats;
    wc_counts _wc_counts;
};

} // namespace shoal::net::rdma::internal
