#pragma once

#include "core/fd_watcher.hh"
#include "core/future.hh"
#include "core/timer.hh"
#include "net/rdma/async_event.hh"
#include "net/rdma/cm_event.hh"
#include "net/rdma/cq_poller.hh"
#include "net/rdma/device.hh"
#include "net/rdma/memory_pool.hh"
#include "net/rdma/options.hh"
#include "net/rdma/receive_queue.hh"
#include "net/rdma/shard_check.hh"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

namespace shoal::net::rdma {

namespace internal {
class connection_impl;
class acceptor;
class listener_impl;
} // namespace internal

/// One receive size class of a shard: its SRQ's buffer size and receives.
struct receive_class_stats {
    size_t buffer_size = 0; ///< bytes of each receive buffer
    unsigned posted = 0;    ///< receives posted in its SRQ
    unsigned committed = 0; ///< of which promised to peers as credits
    unsigned slack = 0;     ///< receives it keeps posted beyond the promised ones
};

/// Counters of a shard's RDMA context; read them on its shard.
struct context_stats {
    internal::cq_stats cq;        ///< completion queue and wake-ups
    uint64_t post_send_calls = 0; ///< ibv_post_send calls (each carries a batch of requests)
    uint64_t send_requests = 0;   ///< send work requests posted
    uint64_t connections = 0;     ///< connections alive on the shard
    uint64_t cm_events = 0;       ///< rdma_cm events handled
    unsigned srq_posted = 0;      ///< receives posted in the SRQs (all size classes)
    unsigned srq_committed = 0;   ///< of which promised to peers as credits
    /// The receive size classes in use (`srq_classes` of them; the shard's default first).
    std::array<receive_class_stats, max_receive_classes> srq_class{};
    unsigned srq_classes = 0;       ///< receive size classes (SRQs) the shard holds
    uint64_t async_events = 0;      ///< device asynchronous events handled on this shard
    uint64_t last_wqe_events = 0;   ///< QPs whose teardown saw IBV_EVENT_QP_LAST_WQE_REACHED
    uint64_t last_wqe_timeouts = 0; ///< QPs torn down after waiting for it in vain
    uint64_t srq_limit_events = 0;  ///< IBV_EVENT_SRQ_LIMIT_REACHED (the SRQ was refilled)
    /// Times a connection of the shard stopped sending for lack of the peer's receive credits
    /// (`connection_stats::credit_stalls` summed over the live connections and the closed ones).
    uint64_t credit_stalls = 0;
};

/// One shard's RDMA resources: a protection domain (on a thread domain / parent domain where
/// the provider supports it, so it takes no locks), a completion queue with its channel and
/// poller, a shared receive queue per receive size class in use, the registered memory pool, the rdma_cm
/// event channel and the shard's connections. Created by `rdma::start` on every shard and touched only by its
/// shard (debug builds check).
class shard_context final : private internal::cq_poller::hooks, private internal::receive_sink {
public:
    /// Builds `shard`'s PD, pool, CQ, SRQ and rdma_cm channel on `dev`; `start()` then starts
    /// polling. Throws rdma_error.
    shard_context(std::shared_ptr<const device> dev, const options& opts, unsigned shard);
    ~shard_context();
    shard_context(const shard_context&) = delete;
    shard_context& operator=(const shard_context&) = delete;

    /// The calling shard's context; throws rdma_error when `rdma::start` has not run.
    static shard_context& local();
    /// The calling shard's context or null.
    static shard_context* local_or_null() noexcept;

    /// The device the resources are built on.
    const device& dev() const noexcept { return *_dev; }
    /// The same device, shared.
    const std::shared_ptr<const device>& dev_ptr() const noexcept { return _dev; }
    /// The protection domain memory is registered with.
    ibv_pd* pd() const noexcept { return _pd; }
    /// The domain QPs and the SRQ are created on (the parent domain when there is a thread
    /// domain, else `pd()`).
    ibv_pd* qp_pd() const noexcept { return _parent ? _parent : _pd; }
    /// Whether this shard's resources sit on a thread domain (no provider locks).
    bool thread_domain() const noexcept { return _parent != nullptr; }
    /// The shard's first completion queue (a shard with many connections has several:
    /// `stats().cq.cqs`; each connection's QP uses the one `add_connection` gave it).
    ibv_cq* cq() const noexcept { return _cq->cq(); }
    /// True while the poller dispatches a completion (a completion handler runs).
    bool dispatching() const noexcept { return _cq->dispatching(); }
    /// The shared receive queue of the shard's default receive class
    /// (`options::recv_buffer_size`), made with the context.
    internal::shared_receive_queue& srq() noexcept { return *_srqs.front(); }
    /// The shared receive queue of the receive size class `requested`
    /// (`connection_options::recv_buffer_size`; 0: the default class), made on first use with
    /// its slack posted, and counts a user of it (`release_receive_queue` when done). Throws
    /// std::invalid_argument for a size that is no class (`receive_class_size`),
    /// connection_error when the shard holds `max_receive_classes` others, rdma_error when the
    /// SRQ cannot be made.
    internal::shared_receive_queue& receive_queue_for(size_t requested);
    /// A user of `q` is done (a listener closed, a connection's QP destroyed and the CQs
    /// drained). A class other than the default one that has no user left is destroyed, its
    /// posted receives going back to the pool. Never call it inside a completion dispatch.
    void release_receive_queue(internal::shared_receive_queue& q) noexcept;
    /// The shard's shared receive queues, one per receive size class (the default one first).
    const std::vector<std::unique_ptr<internal::shared_receive_queue>>& receive_queues() const noexcept {
        return _srqs;
    }
    /// The shard's registered memory.
    memory_pool& pool() noexcept { return *_pool; }
    /// Whether the device binds memory windows of type 2 (`memory_window`).
    bool memory_windows() const noexcept;
    /// An unbound type-2 window of the shard's free list, or null when the list is empty.
    ibv_mw* take_window() noexcept;
    /// Keeps an unbound window for reuse (deallocated with the context).
    void keep_window(ibv_mw* mw);
    /// The rdma_cm event channel of the shard's ids.
    rdma_event_channel* cm_channel() const noexcept { return _cm; }
    /// The shard that owns the context.
    unsigned shard() const noexcept { return _shard; }
    /// The options given to `rdma::start`.
    const options& opts() const noexcept { return _opts; }
    /// A snapshot of the shard's counters.
    context_stats stats() const noexcept;
    /// The shard's work completions by opcode and status.
    const internal::wc_counts& completion_counts() const noexcept { return _cq->completion_counts(); }

    // --- used by connections and listeners (internal)

    /// Adds a connection and reserves CQ entries for its send queue; returns the CQ its QP must
    /// use for sends and receives. Throws rdma_error.
    ibv_cq* add_connection(internal::connection_impl* c, unsigned send_queue_depth);
    /// Routes receives of QP `qpn` to `c`.
    void register_qp(uint32_t qpn, internal::connection_impl* c);
    /// Stops routing receives of QP `qpn` (later ones find no owner and are dropped).
    void unregister_qp(uint32_t qpn) noexcept;
    /// Forgets a connection whose verbs resources are gone.
    void remove_connection(internal::connection_impl* c, ibv_cq* cq, unsigned send_queue_depth) noexcept;
    /// `c` has work requests or credits to post: done once per poll, as one list per QP.
    void mark_dirty(internal::connection_impl* c) noexcept { _dirty.push_back(c); }
    /// Posts for `c` again after the tasks of this reactor round have run (a credit-only
    /// message held back so that a reply written by those tasks can carry the credits).
    void post_next_round(internal::connection_impl* c) noexcept { _next_round.push_back(c); }
    /// `c` could not get receive buffers for its credits: retried every poll.
    void mark_starved(internal::connection_impl* c) noexcept;
    /// Releases `c`'s verbs resources at the end of the current poll (never inside dispatch).
    void destroy_later(internal::connection_impl* c) noexcept;
    /// Tracks an open acceptor of this shard (found by id, closed by `close_all`).
    void add_acceptor(internal::acceptor* a);
    /// The shard's open acceptors.
    const std::vector<internal::acceptor*>& acceptors() const noexcept { return _acceptors; }
    /// Forgets a closed acceptor.
    void remove_acceptor(internal::acceptor* a) noexcept;
    /// Tracks a listening id this shard owns.
    void add_listener(internal::listener_impl* l);
    /// Forgets a destroyed listening id.
    void remove_listener(internal::listener_impl* l) noexcept;
    /// Polls the CQs until empty (used before tearing a connection down).
    unsigned drain_cq() noexcept { return _cq->drain(); }
    /// Counts one ibv_post_send carrying `requests` work requests.
    void count_post(unsigned requests) noexcept {
        ++_post_send_calls;
        _send_requests += requests;
    }
    /// True once `close_all` began: new connections are refused.
    bool stopping() const noexcept { return _stopping; }
    /// Handles a device asynchronous event on this shard (QP and SRQ events for what this shard
    /// owns, device-wide ones for all). Shard 0 reads the device's events and sends each here.
    void on_async_event(const internal::async_event& ev) noexcept;
    /// A connection holds more of its peer's credits than the peer's idle window, or opened its
    /// receive window: from now on the shard asks its connections every `period` to hand back
    /// what they hold while quiet and to close windows whose peer went quiet
    /// (`connection_impl::sweep_idle`), until none has anything left to do. No timer runs while
    /// none does.
    void watch_give_back(std::chrono::milliseconds period) noexcept;
    /// Counts a QP teardown that saw its last-WQE event (`true`) or gave up waiting for it.
    void count_last_wqe(bool seen) noexcept { ++(seen ? _last_wqe_events : _last_wqe_timeouts); }
    /// Why the device can no longer be used (null while it can).
    std::exception_ptr device_failure() const noexcept { return _device_failure; }

    /// Starts the poller and the event-channel watchers.
    void start();
    /// Closes listeners and connections and waits until their resources are gone.
    future<> close_all();
    /// Stops the poller and watchers; resolves when io_uring has let go of every fd.
    future<> stop_watchers();

private:
    bool before_poll() noexcept override;
    bool after_poll() noexcept override;
    /// Posts what connections queued (and retries starved ones); true when it did anything.
    bool post_dirty() noexcept { return (_dirty.empty() && _starved.empty()) ? false : post_queued(); }
    bool post_queued() noexcept;
    void on_receive(const ibv_wc& wc, buffer& buf) noexcept override;
    void on_cm_readable() noexcept;
    void on_async_readable() noexcept;
    static void dispatch_async(const internal::async_event& ev) noexcept;
    void fail_device(const std::string& why) noexcept;
    void reap() noexcept;

    std::shared_ptr<const device> _dev;
    options _opts;
    unsigned _shard;
    ibv_td* _td = nullptr;
    ibv_pd* _pd = nullptr;
    ibv_pd* _parent = nullptr;
    std::unique_ptr<memory_pool> _pool;
    std::vector<ibv_mw*> _windows; // unbound type-2 windows for reuse
    std::unique_ptr<internal::cq_poller> _cq;
    internal::receive_budget _receive_budget; // outlives the SRQs that count against it
    std::vector<std::unique_ptr<internal::shared_receive_queue>> _srqs; // the default class first
    rdma_event_channel* _cm = nullptr;
    std::unique_ptr<fd_watcher> _cm_watcher;
    std::unique_ptr<fd_watcher> _async_watcher; // shard 0 only
    std::unordered_map<uint32_t, internal::connection_impl*> _qps;
    std::vector<internal::connection_impl*> _connections;
    std::vector<internal::connection_impl*> _dirty;
    std::vector<internal::connection_impl*> _next_round;
    std::vector<internal::connection_impl*> _starved;
    std::vector<internal::connection_impl*> _graveyard;
    std::vector<internal::acceptor*> _acceptors;
    std::vector<internal::listener_impl*> _listeners;
    uint64_t _post_send_calls = 0;
    uint64_t _send_requests = 0;
    uint64_t _cm_events = 0;
    uint64_t _async_events = 0;
    uint64_t _last_wqe_events = 0;
    uint64_t _last_wqe_timeouts = 0;
    uint64_t _srq_limit_events = 0;
    uint64_t _closed_credit_stalls = 0; // credit_stalls of connections already removed
    std::exception_ptr _device_failure;
    timer<> _give_back_timer;
    std::chrono::milliseconds _give_back_period{0}; // 0: the timer is not armed
    bool _stopping = false;
    std::optional<promise<>> _all_closed;
};

/// Opens the RDMA device and creates every shard's context. Call once, from any shard, after
/// the engine started. Throws (in the future) device_error when there is no usable device;
/// the rest of the framework (TCP) is unaffected.
future<> start(const options& opts);
/// `start` with the default options.
future<> start();
/// Closes every RDMA connection and listener and destroys the shards' contexts. Buffers and
/// connections the application still holds should be dropped first.
future<> stop();
/// Whether the calling shard has its RDMA context (`start` built it here; other shards may
/// still be starting until `start` resolves).
bool started() noexcept;
namespace internal {
/// The rdma_cm event channel of `shard` (null before `start` or after `stop`); listeners migrate
/// accepted ids to it.
rdma_event_channel* cm_channel_of(unsigned shard) noexcept;
} // namespace internal

} // namespace shoal::net::rdma
