#include "net/rdma/context.hh"

#include "core/future_util.hh"
#include "core/log.hh"
#include "core/smp.hh"
#include "net/rdma/connection_impl.hh"
#include "net/rdma/connection_manager.hh"
#include "net/rdma/error.hh"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <fmt/format.h>

namespace shoal::net::rdma {

namespace {
logger ctx_log("rdma");
thread_local shard_context* tl_ctx = nullptr;
/// Each shard's rdma_cm channel, so a listener can migrate an accepted id to its target shard.
/// Written by each shard for itself during start, before any listener exists.
std::vector<rdma_event_channel*> g_channels;
std::shared_ptr<const device> g_device;

template <typename T>
void erase_one(std::vector<T*>& v, T* p) noexcept {
    auto it = std::find(v.begin(), v.end(), p);
    if (it != v.end()) {
        *it = v.back();
        v.pop_back();
    }
}
} // namespace

void internal::check_shard(unsigned owner, const char* what) noexcept {
    if (this_shard_id() != owner) {
        std::fprintf(stderr, "shoal rdma: %s of shard %u used on shard %u (RDMA resources are per shard)\n",
                     what, owner, this_shard_id());
        std::abort();
    }
}

rdma_event_channel* internal::cm_channel_of(unsigned shard) noexcept {
    return shard < g_channels.size() ? g_channels[shard] : nullptr;
}

shard_context::shard_context(std::shared_ptr<const device> dev, const options& opts, unsigned shard)
    : _dev(std::move(dev))
    , _opts(opts)
    , _shard(shard) {
    ibv_context* verbs = _dev->context();
    try {
        _pd = ibv_alloc_pd(verbs);
        if (!_pd) {
            internal::throw_errno("ibv_alloc_pd(" + _dev->name() + ")", errno);
        }
        if (_dev->capabilities().thread_domain) {
            ibv_td_init_attr td_attr{};
            _td = ibv_alloc_td(verbs, &td_attr);
            if (_td) {
                ibv_parent_domain_init_attr pattr{};
                pattr.pd = _pd;
                pattr.td = _td;
                _parent = ibv_alloc_parent_domain(verbs, &pattr);
                if (!_parent) {
                    ctx_log.warn("shard {}: ibv_alloc_parent_domain failed ({}): using a plain PD", shard,
                                 std::strerror(errno));
                    ibv_dealloc_td(_td);
                    _td = nullptr;
                }
            }
        }
        _pool = std::make_unique<memory_pool>(_pd, _opts.pool, shard);
        // Every CQ keeps room for all the SRQ's receives (they may all complete on one CQ).
        _cq = std::make_unique<internal::cq_poller>(
            verbs, _opts.cq_size + _opts.srq_size, _opts.srq_size,
            unsigned(std::max(0, _dev->attributes().orig_attr.max_cqe)), _opts.cq_batch,
            static_cast<internal::cq_poller::hooks&>(*this));
        _receive_budget.limit = _opts.srq_size;
        _srqs.push_back(std::make_unique<internal::shared_receive_queue>(
            qp_pd(), *_pool, _opts.srq_size, _opts.recv_buffer_size,
            static_cast<internal::receive_sink&>(*this), _opts.srq_slack, _receive_budget));
        _cm = rdma_create_event_channel();
        if (!_cm) {
            internal::throw_errno("rdma_create_event_channel", errno);
        }
        int flags = fcntl(_cm->fd, F_GETFL);
        if (flags < 0 || fcntl(_cm->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
            internal::throw_errno("making the rdma_cm channel non-blocking", errno);
        }
        _cm_watcher = std::make_unique<fd_watcher>(_cm->fd, [this] { on_cm_readable(); });
        if (shard == 0) {
            // One reader of the device's asynchronous events (QP fatal / last WQE, SRQ limit,
            // port and device events); it hands each to the shard that owns what it names.
            int aflags = fcntl(verbs->async_fd, F_GETFL);
            if (aflags < 0 || fcntl(verbs->async_fd, F_SETFL, aflags | O_NONBLOCK) < 0) {
                internal::throw_errno("making the device's async event fd non-blocking", errno);
            }
            _async_watcher = std::make_unique<fd_watcher>(
                verbs->async_fd, [this] { on_async_readable(); },
                [](int) {
                    // Events can no longer be read: the device is as good as failed.
                    internal::async_event ev;
                    ev.type = IBV_EVENT_DEVICE_FATAL;
                    dispatch_async(ev);
                });
        }
    } catch (...) {
        if (_cm) {
            rdma_destroy_event_channel(_cm);
        }
        _srqs.clear();
        _cq.reset();
        _pool.reset();
        if (_parent) {
            ibv_dealloc_pd(_parent);
        }
        if (_pd) {
            ibv_dealloc_pd(_pd);
        }
        if (_td) {
            ibv_dealloc_td(_td);
        }
        throw;
    }
}

shard_context::~shard_context() {
    _give_back_timer.cancel();
    if (!_connections.empty()) {
        ctx_log.error("shard {}: RDMA context destroyed with {} connections", _shard, _connections.size());
    }
    _cm_watcher.reset();
    _async_watcher.reset();
    if (_cm) {
        rdma_destroy_event_channel(_cm);
    }
    _srqs.clear();
    _cq.reset();
    bool leak = _pool && _pool->stats().in_use_buffers > 0;
    if (leak) {
        // Freeing the regions would pull memory from under the holders: keep it (and the PD).
        ctx_log.error("shard {}: {} pool buffers are still held at rdma::stop; their memory is leaked",
                      _shard, _pool->stats().in_use_buffers);
        (void)_pool.release();
        return;
    }
    for (ibv_mw* mw : _windows) {
        ibv_dealloc_mw(mw);
    }
    _windows.clear();
    _pool.reset();
    if (_parent) {
        ibv_dealloc_pd(_parent);
    }
    if (int rc = ibv_dealloc_pd(_pd); rc != 0) {
        ctx_log.error("shard {}: ibv_dealloc_pd: {} (memory still registered?)", _shard, std::strerror(rc));
    }
    if (_td) {
        ibv_dealloc_td(_td);
    }
}

bool shard_context::memory_windows() const noexcept {
    return _dev->capabilities().memory_windows;
}

ibv_mw* shard_context::take_window() noexcept {
    if (_windows.empty()) {
        return nullptr;
    }
    ibv_mw* mw = _windows.back();
    _windows.pop_back();
    return mw;
}

void shard_context::keep_window(ibv_mw* mw) {
    _windows.push_back(mw);
}

shard_context& shard_context::local() {
    if (!tl_ctx) {
        throw rdma_error("RDMA is not started on shard " + std::to_string(this_shard_id()) +
                         ": call rdma::start() first");
    }
    return *tl_ctx;
}

shard_context* shard_context::local_or_null() noexcept {
    return tl_ctx;
}

context_stats shard_context::stats() const noexcept {
    context_stats s;
    s.cq = _cq->stats();
    s.post_send_calls = _post_send_calls;
    s.send_requests = _send_requests;
    s.connections = _connections.size();
    s.cm_events = _cm_events;
    for (const auto& q : _srqs) {
        s.srq_class[s.srq_classes++] = {q->buffer_size(), q->posted(), q->committed(), q->slack()};
        s.srq_posted += q->posted();
        s.srq_committed += q->committed();
    }
    s.async_events = _async_events;
    s.last_wqe_events = _last_wqe_events;
    s.last_wqe_timeouts = _last_wqe_timeouts;
    s.srq_limit_events = _srq_limit_events;
    s.credit_stalls = _closed_credit_stalls;
    for (const auto* c : _connections) {
        s.credit_stalls += c->stats().credit_stalls;
    }
    return s;
}

void shard_context::start() {
    _cq->start();
    _cm_watcher->start();
    if (_async_watcher) {
        _async_watcher->start();
    }
    _srqs.front()->refill(); // the slack, posted once; receives it loses are reposted as they complete
}

internal::shared_receive_queue& shard_context::receive_queue_for(size_t requested) {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA context");
    const size_t size = receive_class_size(requested, _opts);
    std::string in_use;
    for (const auto& q : _srqs) {
        if (q->buffer_size() == size) {
            q->attach();
            return *q;
        }
        in_use += (in_use.empty() ? "" : ", ") + std::to_string(q->buffer_size());
    }
    if (_srqs.size() >= max_receive_classes) {
        throw connection_error(fmt::format("no receive size class of {} bytes on shard {}: it holds the "
                                           "most it may ({}: {} bytes)",
                                           size, _shard, max_receive_classes, in_use));
    }
    // Same slack as the default class: what one peer sending without credits can have in flight
    // does not depend on the buffer size, and a small class's slack costs little memory.
    _srqs.push_back(std::make_unique<internal::shared_receive_queue>(
        qp_pd(), *_pool, _opts.srq_size, size, static_cast<internal::receive_sink&>(*this), _opts.srq_slack,
        _receive_budget));
    ctx_log.debug("shard {}: receive size class of {} bytes (SRQ {} of {})", _shard, size, _srqs.size(),
                  max_receive_classes);
    _srqs.back()->refill();
    _srqs.back()->attach();
    return *_srqs.back();
}

void shard_context::release_receive_queue(internal::shared_receive_queue& q) noexcept {
    q.detach();
    if (q.users() > 0 || &q == _srqs.front().get()) {
        return;
    }
    // No QP is attached any more and the CQs were drained: no completion names its receives.
    auto it = std::find_if(_srqs.begin(), _srqs.end(), [&q](const auto& p) { return p.get() == &q; });
    if (it != _srqs.end()) {
        ctx_log.debug("shard {}: receive size class of {} bytes unused: freed with its {} receives", _shard,
                      q.buffer_size(), q.posted());
        _srqs.erase(it);
    }
}

ibv_cq* shard_context::add_connection(internal::connection_impl* c, unsigned send_queue_depth) {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA context");
    if (_stopping) {
        throw connection_closed("RDMA is shutting down on shard " + std::to_string(_shard));
    }
    if (_device_failure) {
        std::rethrow_exception(_device_failure);
    }
    if (_connections.size() >= _opts.max_connections) {
        throw connection_error(
            fmt::format("connection limit of {} reached on shard {}", _opts.max_connections, _shard));
    }
    ibv_cq* cq = _cq->reserve(send_queue_depth);
    _connections.push_back(c);
    return cq;
}

void shard_context::register_qp(uint32_t qpn, internal::connection_impl* c) {
    _qps[qpn] = c;
}

void shard_context::unregister_qp(uint32_t qpn) noexcept {
    _qps.erase(qpn);
}

void shard_context::remove_connection(internal::connection_impl* c, ibv_cq* cq,
                                      unsigned send_queue_depth) noexcept {
    if (std::find(_connections.begin(), _connections.end(), c) != _connections.end()) {
        _closed_credit_stalls += c->stats().credit_stalls;
    }
    erase_one(_connections, c);
    erase_one(_dirty, c);
    erase_one(_next_round, c);
    erase_one(_starved, c);
    _cq->unreserve(cq, send_queue_depth);
    if (_connections.empty() && _all_closed) {
        _all_closed->set_value();
        _all_closed.reset();
    }
}

void shard_context::watch_give_back(std::chrono::milliseconds period) noexcept {
    if (_give_back_period.count() > 0) {
        return;
    }
    _give_back_period = period;
    _give_back_timer.set_callback([this] {
        bool again = false;
        for (size_t i = 0; i < _connections.size(); ++i) {
            again |= _connections[i]->sweep_idle();
        }
        if (again) {
            _give_back_timer.arm(_give_back_period);
        } else {
            _give_back_period = std::chrono::milliseconds(0);
        }
    });
    _give_back_timer.arm(period);
}

void shard_context::mark_starved(internal::connection_impl* c) noexcept {
    _starved.push_back(c);
}

void shard_context::destroy_later(internal::connection_impl* c) noexcept {
    _graveyard.push_back(c);
}

void shard_context::add_acceptor(internal::acceptor* a) {
    _acceptors.push_back(a);
}

void shard_context::remove_acceptor(internal::acceptor* a) noexcept {
    erase_one(_acceptors, a);
}

void shard_context::add_listener(internal::listener_impl* l) {
    _listeners.push_back(l);
}

void shard_context::remove_listener(internal::listener_impl* l) noexcept {
    erase_one(_listeners, l);
}

bool shard_context::before_poll() noexcept {
    // Called after the round's tasks ran (never from inside after_poll): what was held back
    // for them is posted now, unless they took it.
    bool held = !_next_round.empty();
    for (auto* c : _next_round) {
        c->need_post();
    }
    _next_round.clear();
    return post_dirty() || held;
}

// Inlined into `before_poll` and `after_poll` (through `post_dirty`): one call less per post.
[[gnu::always_inline]] inline bool shard_context::post_queued() noexcept {
    bool work = false;
    if (!_starved.empty()) {
        for (size_t i = 0; i < _starved.size();) {
            if (_starved[i]->retry_credits()) {
                _starved[i] = _starved.back();
                _starved.pop_back();
            } else {
                ++i;
            }
        }
    }
    if (!_dirty.empty()) {
        // Index loop: posting may queue more connections (never the one being posted).
        for (size_t i = 0; i < _dirty.size(); ++i) {
            _dirty[i]->post_pending();
        }
        _dirty.clear();
        work = true;
    }
    return work;
}

bool shard_context::after_poll() noexcept {
    bool work = post_dirty() || !_next_round.empty();
    if (!_graveyard.empty()) {
        reap();
        work = true;
    }
    return work;
}

void shard_context::reap() noexcept {
    while (!_graveyard.empty()) {
        internal::connection_impl* c = _graveyard.back();
        _graveyard.pop_back();
        c->destroy_resources();
    }
}

void shard_context::on_receive(const ibv_wc& wc, buffer& buf) noexcept {
    auto it = _qps.find(wc.qp_num);
    if (it == _qps.end()) {
        return; // its connection is gone: the receive queue reposts the buffer
    }
    it->second->on_receive(wc, buf);
}

void shard_context::on_cm_readable() noexcept {
    rdma_cm_event* ev = nullptr;
    while (rdma_get_cm_event(_cm, &ev) == 0) {
        internal::cm_event e;
        e.type = ev->event;
        e.status = ev->status;
        e.id = ev->id;
        e.listen_id = ev->listen_id;
        switch (ev->event) {
        case RDMA_CM_EVENT_CONNECT_REQUEST:
        case RDMA_CM_EVENT_CONNECT_RESPONSE:
        case RDMA_CM_EVENT_ESTABLISHED:
        case RDMA_CM_EVENT_REJECTED:
            e.responder_resources = ev->param.conn.responder_resources;
            e.initiator_depth = ev->param.conn.initiator_depth;
            if (ev->param.conn.private_data && ev->param.conn.private_data_len) {
                e.private_data_len = std::min<uint8_t>(ev->param.conn.private_data_len, 255);
                std::memcpy(e.private_data.data(), ev->param.conn.private_data, e.private_data_len);
            }
            break;
        default:
            break;
        }
        rdma_ack_cm_event(ev);
        ++_cm_events;
        rdma_cm_id* owner = e.type == RDMA_CM_EVENT_CONNECT_REQUEST ? e.listen_id : e.id;
        auto* h = owner ? static_cast<internal::cm_handler*>(owner->context) : nullptr;
        if (!h) {
            if (e.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
                rdma_reject(e.id, nullptr, 0);
                rdma_destroy_id(e.id);
            }
            continue;
        }
        h->on_cm_event(e);
    }
}

void shard_context::on_async_readable() noexcept {
    ibv_context* verbs = _dev->context();
    ibv_async_event raw;
    while (ibv_get_async_event(verbs, &raw) == 0) {
        internal::async_event ev;
        ev.type = raw.event_type;
        if (internal::is_qp_event(ev.type)) {
            ev.qp_num = raw.element.qp->qp_num;
        } else if (internal::is_srq_event(ev.type)) {
            ev.srq = raw.element.srq;
        } else {
            ev.port = raw.element.port_num;
        }
        // Acknowledged before anything is done: destroying a QP waits for its events' acks.
        ibv_ack_async_event(&raw);
        ctx_log.debug("shard {}: async event {} (QP {}, port {})", _shard, ibv_event_type_str(ev.type),
                      ev.qp_num, ev.port);
        dispatch_async(ev);
    }
}

void shard_context::dispatch_async(const internal::async_event& ev) noexcept {
    for (unsigned s = 0; s < shard_count(); ++s) {
        (void)submit_to(s, [ev] {
            if (shard_context* c = shard_context::local_or_null()) {
                c->on_async_event(ev);
            }
        });
    }
}

void shard_context::on_async_event(const internal::async_event& ev) noexcept {
    ++_async_events;
    if (internal::is_qp_event(ev.type)) {
        auto it = _qps.find(ev.qp_num);
        if (it != _qps.end()) {
            it->second->on_qp_event(ev.type);
        }
        return;
    }
    if (internal::is_srq_event(ev.type)) {
        for (const auto& q : _srqs) {
            if (ev.srq != q->srq()) {
                continue;
            }
            if (ev.type == IBV_EVENT_SRQ_LIMIT_REACHED) {
                ++_srq_limit_events;
                q->refill();
            } else {
                fail_device(fmt::format("its shared receive queue of {}-byte receives on shard {} failed",
                                        q->buffer_size(), _shard));
            }
            break;
        }
        return;
    }
    switch (ev.type) {
    case IBV_EVENT_PORT_ERR:
        // Kept: RC retries ride out a short outage; a QP whose peer stays unreachable fails on
        // its own (retry count exceeded) and only that connection closes.
        ctx_log.warn("shard {}: port {} of {} went down; connections are kept (each fails if its "
                     "peer stays unreachable)",
                     _shard, ev.port, _dev->name());
        break;
    case IBV_EVENT_PORT_ACTIVE:
        ctx_log.info("shard {}: port {} of {} is up", _shard, ev.port, _dev->name());
        break;
    case IBV_EVENT_DEVICE_FATAL:
        fail_device("fatal device error");
        break;
    default:
        break;
    }
}

void shard_context::fail_device(const std::string& why) noexcept {
    if (!_device_failure) {
        ctx_log.error("shard {}: RDMA device {} unusable: {}; its connections fail, the shard keeps running",
                      _shard, _dev->name(), why);
        _device_failure = std::make_exception_ptr(
            connection_closed("the RDMA device " + _dev->name() + " can no longer be used: " + why));
    }
    for (auto* c : std::vector<internal::connection_impl*>(_connections)) {
        c->close(_device_failure);
    }
}

future<> shard_context::close_all() {
    _stopping = true;
    std::vector<future<>> closing;
    for (auto* a : std::vector<internal::acceptor*>(_acceptors)) {
        closing.push_back(internal::close_acceptor(a));
    }
    future<> all = when_all_succeed(std::move(closing));
    co_await std::move(all);
    for (auto* c : std::vector<internal::connection_impl*>(_connections)) {
        c->close(std::make_exception_ptr(connection_closed("RDMA is shutting down")));
    }
    if (!_connections.empty()) {
        _all_closed.emplace();
        co_await _all_closed->get_future();
    }
}

future<> shard_context::stop_watchers() {
    co_await _cq->stop();
    co_await _cm_watcher->stop();
    if (_async_watcher) {
        co_await _async_watcher->stop();
    }
}

// --- start / stop

bool started() noexcept {
    return tl_ctx != nullptr;
}

namespace {
future<> start_impl(options opts) {
    if (g_device) {
        throw rdma_error("rdma::start called twice");
    }
    std::shared_ptr<const device> dev = device::open(opts.device);
    g_device = dev;
    g_channels.assign(shard_count(), nullptr);
    // (Named, not a temporary inside co_await: GCC 12 mishandles such temporaries' destruction.)
    std::function<future<>()> create = [dev, opts]() {
        auto* c = new shard_context(dev, opts, this_shard_id());
        c->start();
        tl_ctx = c;
        g_channels[this_shard_id()] = c->cm_channel();
        return make_ready_future<>();
    };
    std::exception_ptr failed;
    try {
        future<> created = invoke_on_all_shards(create);
        co_await std::move(created);
    } catch (...) {
        failed = std::current_exception();
    }
    if (failed) {
        co_await stop();
        std::rethrow_exception(failed);
    }
    ctx_log.info("RDMA on {} shards: {}, per-shard PD {}", shard_count(), dev->describe(),
                 dev->capabilities().thread_domain ? "on a thread domain" : "without thread domain");
}
} // namespace

future<> start(const options& opts) {
    return start_impl(opts);
}

future<> start() {
    return start_impl(options());
}

future<> stop() {
    std::function<future<>()> close = [] { return tl_ctx ? tl_ctx->close_all() : make_ready_future<>(); };
    future<> closed = invoke_on_all_shards(close);
    co_await std::move(closed);
    std::function<future<>()> destroy = []() -> future<> {
        shard_context* c = tl_ctx;
        if (!c) {
            co_return;
        }
        co_await c->stop_watchers();
        tl_ctx = nullptr;
        delete c;
    };
    future<> destroyed = invoke_on_all_shards(destroy);
    co_await std::move(destroyed);
    g_channels.clear();
    g_device.reset();
}

} // namespace shoal::net::rdma
