#pragma once

#include "core/future.hh"
#include "core/reactor.hh"
#include "net/rdma/fd_watcher.hh"

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
    uint64_t resizes = 0;     ///< times the CQ grew
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

/// A shard's completion queue, its completion channel and the reactor poller that drains it.
/// Each completion is dispatched to the `completion_handler` its `wr_id` points to. Before the
/// reactor sleeps, `try_arm` requests a notification (`ibv_req_notify_cq`) and polls once more,
/// so a completion that raced the arming is not lost; the completion channel's fd is watched by
/// the shard's io_uring and its event ends the sleep.
class cq_poller final : public poller {
public:
    /// Work the owner does around each poll round (post queued sends, reclaim connections).
    class hooks {
    public:
        /// Before the CQ is polled; returns true if it did work.
        virtual bool before_poll() noexcept = 0;
        /// After the CQ was polled (and on every re-check); returns true if it did work.
        virtual bool after_poll() noexcept = 0;

    protected:
        ~hooks() = default;
    };

    /// Creates the channel and a CQ of at least `entries`. Throws rdma_error.
    cq_poller(ibv_context* ctx, unsigned entries, unsigned batch, hooks& h);
    ~cq_poller() override;
    cq_poller(const cq_poller&) = delete;
    cq_poller& operator=(const cq_poller&) = delete;

    /// Registers with the calling shard's reactor and starts watching the channel.
    void start();
    /// Unregisters and stops watching; resolves when io_uring has let go of the channel fd.
    future<> stop();

    /// The completion queue.
    ibv_cq* cq() const noexcept { return _cq; }
    /// CQ entries available.
    unsigned capacity() const noexcept { return unsigned(_cq->cqe); }
    /// Grows the CQ to at least `entries` (no-op if it is that large). Throws rdma_error.
    void ensure_capacity(unsigned entries);
    /// Polls and dispatches until the CQ is empty; returns the completions handled.
    unsigned drain() noexcept;
    /// The poller's counters.
    const cq_stats& stats() const noexcept { return _stats; }
    /// Completions dispatched so far, by opcode and status.
    const wc_counts& completion_counts() const noexcept { return _wc_counts; }

    bool poll() override;
    bool try_arm() override;
    void disarm() override {}

private:
    unsigned poll_batch() noexcept;
    void on_channel_readable() noexcept;
    void ack_events() noexcept;

    ibv_context* _ctx;
    ibv_comp_channel* _channel = nullptr;
    ibv_cq* _cq = nullptr;
    unsigned _batch;
    hooks& _hooks;
    std::unique_ptr<fd_watcher> _watcher;
    std::vector<ibv_wc> _wcs;
    bool _armed = false;
    bool _registered = false;
    unsigned _unacked_events = 0;
    unsigned _polling = 0; // nesting depth of dispatch (drain from inside a handler)
    cq_stats _stats;
    wc_counts _wc_counts;
};

} // namespace shoal::net::rdma::internal
