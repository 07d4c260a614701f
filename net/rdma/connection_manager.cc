// rdma_cm: listening, connecting, accepting (spread over shards), connection setup and
// teardown of connection_impl.
#include "net/rdma/connection_manager.hh"

#include "core/log.hh"
#include "core/smp.hh"
#include "net/rdma/connection_impl.hh"
#include "net/rdma/context.hh"
#include "net/rdma/error.hh"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <unordered_map>

#include <fmt/format.h>

namespace shoal::net::rdma::internal {

namespace {
logger cm_log("rdma-cm");
std::mutex g_groups_mu;
std::unordered_map<std::string, std::shared_ptr<listener_group>> g_groups;
std::atomic<uint64_t> g_next_acceptor{1};

net::socket_address address_of(const sockaddr* sa) noexcept {
    if (!sa) {
        return {};
    }
    socklen_t len = sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    return net::socket_address(sa, len);
}

void reject(rdma_cm_id* id, const std::string& why) noexcept {
    std::string pdata = encode_reject_reason(why);
    rdma_reject(id, pdata.data(), uint8_t(pdata.size()));
    rdma_destroy_id(id);
}

/// Text of an rdma_cm REJECTED status (IB CM reject reasons).
std::string reject_text(int status) {
    switch (status) {
    case 8:
        return "no listener on that address and port (invalid service id)";
    case 28:
        return "rejected by the peer";
    default:
        return "rejected (IB CM reason " + std::to_string(status) + ")";
    }
}

std::string status_text(int status) {
    if (status < 0) {
        return std::strerror(-status);
    }
    return "status " + std::to_string(status);
}
} // namespace

// --- listener_impl

listener_impl::listener_impl(shard_context& ctx, std::shared_ptr<listener_group> g)
    : _ctx(ctx)
    , _group(std::move(g)) {
    _ctx.add_listener(this);
}

listener_impl::~listener_impl() {
    _ctx.remove_listener(this);
}

void listener_impl::destroy() noexcept {
    SHOAL_RDMA_CHECK_SHARD(_group->owner_shard, "RDMA listener");
    if (_group->id) {
        rdma_destroy_id(_group->id);
        _group->id = nullptr;
    }
    _group->owner = nullptr;
    delete this;
}

void listener_impl::on_cm_event(const cm_event& ev) noexcept {
    if (ev.type != RDMA_CM_EVENT_CONNECT_REQUEST) {
        if (ev.type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
            cm_log.error("the RDMA device of listener {} was removed", _group->addr.to_string());
        }
        return;
    }
    std::pair<unsigned, uint64_t> target{0, 0};
    {
        std::lock_guard lk(_group->mu);
        if (!_group->members.empty()) {
            target = _group->members[_group->next++ % _group->members.size()];
        }
    }
    if (target.second == 0) {
        reject(ev.id, "not accepting connections");
        return;
    }
    if (target.first == _ctx.shard()) {
        if (acceptor* a = find_acceptor(target.second)) {
            a->handle_request(ev.id, ev);
        } else {
            reject(ev.id, "not accepting connections");
        }
        return;
    }
    // Hand the id to the target shard: its events now arrive on that shard's channel.
    ev.id->context = nullptr;
    if (rdma_migrate_id(ev.id, cm_channel_of(target.first)) != 0) {
        cm_log.error("rdma_migrate_id to shard {}: {}", target.first, std::strerror(errno));
        reject(ev.id, "internal error");
        return;
    }
    (void)submit_to(target.first, [id = ev.id, ev, aid = target.second] {
        if (acceptor* a = find_acceptor(aid)) {
            a->handle_request(id, ev);
        } else {
            reject(id, "not accepting connections");
        }
    });
}

// --- acceptor

acceptor::acceptor(shard_context& ctx, std::shared_ptr<listener_group> g, const connection_options& opts,
                   unsigned backlog)
    : _ctx(&ctx)
    , _srq(&ctx.receive_queue_for(opts.recv_buffer_size))
    , _shard(ctx.shard())
    , _id(g_next_acceptor.fetch_add(1))
    , _group(std::move(g))
    , _opts(opts)
    , _backlog(std::max(1u, backlog)) {
    _ctx->add_acceptor(this);
}

acceptor::~acceptor() {
    if (!_closed) {
        (void)close();
    }
}

acceptor* find_acceptor(uint64_t id) noexcept {
    shard_context* ctx = shard_context::local_or_null();
    if (!ctx) {
        return nullptr;
    }
    for (acceptor* a : ctx->acceptors()) {
        if (a->id() == id) {
            return a;
        }
    }
    return nullptr;
}

future<std::shared_ptr<connection_ref>> acceptor::accept(abort_source* as) {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA listener");
    if (as && as->abort_requested()) {
        return make_exception_future<std::shared_ptr<connection_ref>>(as->abort_exception());
    }
    if (!_ready.empty()) {
        auto ref = std::move(_ready.front());
        _ready.pop_front();
        return make_ready_future<std::shared_ptr<connection_ref>>(std::move(ref));
    }
    if (_abort || _closed) {
        return make_exception_future<std::shared_ptr<connection_ref>>(
            _abort ? _abort : std::make_exception_ptr(connection_error("RDMA listener is closed")));
    }
    if (_waiter) {
        return make_exception_future<std::shared_ptr<connection_ref>>(
            std::logic_error("accept() called while another accept() is pending"));
    }
    _waiter.emplace();
    auto f = _waiter->get_future();
    if (as) {
        _waiter_abort = as->subscribe([this](const std::exception_ptr& ex) {
            if (_waiter) {
                auto w = std::move(*_waiter);
                _waiter.reset();
                w.set_exception(ex);
            }
        });
    }
    return f;
}

void acceptor::abort_accept() noexcept {
    if (!_abort) {
        _abort = std::make_exception_ptr(connection_error("accept aborted on " + _group->addr.to_string()));
    }
    (void)close();
}

future<> acceptor::close() noexcept {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA listener");
    if (_closed) {
        return make_ready_future<>();
    }
    _closed = true;
    _ctx->remove_acceptor(this);
    _ctx->release_receive_queue(*_srq); // its pending connections hold the class on their own
    if (_waiter) {
        _waiter->set_exception(_abort ? _abort
                                      : std::make_exception_ptr(connection_error("RDMA listener closed")));
        _waiter.reset();
        _waiter_abort = {};
    }
    for (connection_impl* c : _pending) {
        c->forget_acceptor();
    }
    _pending.clear();
    _ready.clear(); // accepted but never taken: dropping the refs closes them
    bool last = false;
    {
        std::lock_guard lk(g_groups_mu);
        std::lock_guard lk2(_group->mu);
        auto& m = _group->members;
        m.erase(std::remove_if(m.begin(), m.end(), [this](const auto& e) { return e.second == _id; }),
                m.end());
        last = m.empty();
        if (last) {
            auto it = g_groups.find(_group->key);
            if (it != g_groups.end() && it->second == _group) {
                g_groups.erase(it);
            }
        }
    }
    if (!last) {
        return make_ready_future<>();
    }
    auto g = _group;
    return submit_to(g->owner_shard, [g] {
        if (g->owner) {
            g->owner->destroy();
        }
    });
}

future<> close_acceptor(acceptor* a) noexcept {
    return a->close();
}

void acceptor::handle_request(rdma_cm_id* id, const cm_event& ev) noexcept {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA listener");
    std::string err;
    auto params = decode_conn_params(ev.pdata(), err);
    if (!params) {
        cm_log.warn("rejecting a connection to {}: {}", _group->addr.to_string(), err);
        reject(id, err);
        return;
    }
    if (_closed) {
        reject(id, "not accepting connections");
        return;
    }
    if (_ready.size() + _pending.size() >= _backlog) {
        std::string why = fmt::format("accept backlog of {} full on shard {}", _backlog, _shard);
        cm_log.warn("rejecting a connection to {}: {}", _group->addr.to_string(), why);
        reject(id, why);
        return;
    }
    if (id->verbs != _ctx->dev().context()) {
        reject(id, fmt::format("request arrived on RDMA device {}, this side uses {}",
                               id->verbs ? ibv_get_device_name(id->verbs->device) : "(none)",
                               _ctx->dev().name()));
        return;
    }
    connection_impl* c = nullptr;
    try {
        c = new connection_impl(*_ctx, id, _opts, false);
    } catch (const std::exception& e) {
        cm_log.warn("rejecting a connection to {}: {}", _group->addr.to_string(), e.what());
        reject(id, e.what());
        return;
    }
    try {
        c->accept(*params, ev, this);
        _pending.push_back(c);
    } catch (const std::exception& e) {
        cm_log.warn("rejecting a connection to {}: {}", _group->addr.to_string(), e.what());
        std::string pdata = encode_reject_reason(e.what());
        rdma_reject(id, pdata.data(), uint8_t(pdata.size()));
        c->close(std::make_exception_ptr(connection_error(e.what()))); // destroys the id
    }
}

void acceptor::deliver(connection_impl* c) noexcept {
    _pending.erase(std::remove(_pending.begin(), _pending.end(), c), _pending.end());
    auto ref = c->make_ref();
    if (_waiter) {
        auto w = std::move(*_waiter);
        _waiter.reset();
        _waiter_abort = {};
        w.set_value(std::move(ref));
    } else {
        _ready.push_back(std::move(ref));
    }
}

void acceptor::connection_failed(connection_impl* c) noexcept {
    _pending.erase(std::remove(_pending.begin(), _pending.end(), c), _pending.end());
}

std::unique_ptr<acceptor> listen_on(const net::socket_address& addr, const connection_options& opts,
                                    int backlog, unsigned accept_backlog) {
    shard_context& ctx = shard_context::local();
    // The class of the connections it accepts: a bad size or one class too many fails here,
    // before anything is made (the acceptor holds the class).
    shared_receive_queue& srq = ctx.receive_queue_for(opts.recv_buffer_size);
    struct class_hold {
        shard_context& ctx;
        shared_receive_queue& q;
        ~class_hold() { ctx.release_receive_queue(q); }
    } hold{ctx, srq};
    auto fail = [&](const std::string& what, int err) {
        throw connection_error(
            fmt::format("rdma listen on {}: {}: {}", addr.to_string(), what, std::strerror(err)));
    };
    std::lock_guard lk(g_groups_mu);
    std::shared_ptr<listener_group> g;
    if (addr.port() != 0) {
        if (auto it = g_groups.find(addr.to_string()); it != g_groups.end()) {
            g = it->second;
        }
    }
    if (!g) {
        rdma_cm_id* id = nullptr;
        if (rdma_create_id(ctx.cm_channel(), &id, nullptr, RDMA_PS_TCP) != 0) {
            fail("rdma_create_id", errno);
        }
        if (rdma_bind_addr(id, const_cast<sockaddr*>(addr.as_sockaddr())) != 0) {
            int e = errno;
            rdma_destroy_id(id);
            fail(e == EADDRNOTAVAIL || e == ENODEV ? "the address is not on an RDMA device" : "cannot bind",
                 e);
        }
        if (id->verbs && id->verbs != ctx.dev().context()) {
            std::string other = ibv_get_device_name(id->verbs->device);
            rdma_destroy_id(id);
            throw connection_error(
                fmt::format("rdma listen on {}: the address belongs to RDMA device {}, but shoal "
                            "uses {}",
                            addr.to_string(), other, ctx.dev().name()));
        }
        if (rdma_listen(id, backlog) != 0) {
            int e = errno;
            rdma_destroy_id(id);
            fail("rdma_listen", e);
        }
        g = std::make_shared<listener_group>();
        g->id = id;
        g->owner_shard = ctx.shard();
        g->addr = address_of(rdma_get_local_addr(id));
        g->key = g->addr.to_string();
        g->owner = new listener_impl(ctx, g);
        id->context = static_cast<cm_handler*>(g->owner);
        g_groups[g->key] = g;
    }
    auto a = std::make_unique<acceptor>(ctx, g, opts, accept_backlog);
    std::lock_guard lk2(g->mu);
    g->members.emplace_back(ctx.shard(), a->id());
    return a;
}

future<std::shared_ptr<connection_ref>> connect_to(const net::socket_address& addr,
                                                   const connection_options& opts, abort_source* as) {
    if (as && as->abort_requested()) {
        return make_exception_future<std::shared_ptr<connection_ref>>(as->abort_exception());
    }
    shard_context* ctx = shard_context::local_or_null();
    if (!ctx) {
        return make_exception_future<std::shared_ptr<connection_ref>>(
            rdma_error("RDMA is not started on shard " + std::to_string(this_shard_id()) +
                       ": call rdma::start() first"));
    }
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(ctx->cm_channel(), &id, nullptr, RDMA_PS_TCP) != 0) {
        return make_exception_future<std::shared_ptr<connection_ref>>(
            connection_error(errno_text("rdma connect to " + addr.to_string() + ": rdma_create_id", errno)));
    }
    connection_impl* c = nullptr;
    try {
        c = new connection_impl(*ctx, id, opts, true);
    } catch (...) {
        rdma_destroy_id(id);
        return make_exception_future<std::shared_ptr<connection_ref>>(std::current_exception());
    }
    auto f = c->start_connect(addr);
    if (as && !f.available()) {
        c->abort_setup_on(*as);
    }
    return f;
}

// --- connection_impl: setup and teardown

connection_impl::connection_impl(shard_context& ctx, rdma_cm_id* id, const connection_options& opts,
                                 bool active)
    : _ctx(&ctx)
    , _srq(&ctx.receive_queue_for(opts.recv_buffer_size))
    , _shard(ctx.shard())
    , _id(id)
    , _opts(opts)
    , _active(active)
    , _state(active ? state::resolving : state::connecting)
    , _ring(this, opts.send_queue_depth, opts.signal_every) {
    _opts.credits = std::clamp(_opts.credits, 1u, 65535u);
    _opts.idle_credits = std::clamp(_opts.idle_credits, 1u, _opts.credits);
    // At least 2: a credit-only message that returns one control credit must not be answered
    // by another (two idle peers with one control credit each would bounce them forever).
    _opts.ctrl_credits = std::clamp(_opts.ctrl_credits, 2u, max_imm_ctrl_credits);
    _credits = credit_window({_opts.credits, _opts.idle_credits, _opts.ctrl_credits});
    _opts.signal_every = _ring.signal_every();
    _max_inline = ctx.dev().capabilities().max_inline_data;
    try {
        _cq = ctx.add_connection(this, _ring.depth());
    } catch (...) {
        ctx.release_receive_queue(*_srq); // the destructor does not run
        throw;
    }
    _in_context = true;
    _id->context = static_cast<cm_handler*>(this);
    _setup_timer.set_callback(
        [this] { fail_setup(fmt::format("timed out after {} ms", _opts.connect_timeout.count())); });
    _setup_timer.arm(_opts.connect_timeout);
}

connection_impl::~connection_impl() {
    _setup_timer.cancel();
    _close_timer.cancel();
}

void connection_impl::abort_setup_on(abort_source& as) {
    _setup_abort = as.subscribe([this](const std::exception_ptr& ex) {
        if (_connect_promise) {
            close(ex); // fails the connect with the abort's reason, then frees the id and QP
        }
    });
}

std::shared_ptr<connection_ref> connection_impl::make_ref() {
    ++_user_refs;
    return std::make_shared<connection_ref>(this);
}

connection_ref::~connection_ref() {
    _impl->release_user();
}

void connection_impl::release_user() noexcept {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    if (--_user_refs > 0) {
        return;
    }
    if (_resources_gone) {
        delete this;
        return;
    }
    graceful_close();
}

void connection_impl::graceful_close() noexcept {
    // Nobody holds the connection any more. Bytes already written should still reach the peer,
    // followed by the end of the stream, before the QP goes (a bounded wait).
    if (usable() && _stream_taken && !_fin_done_ok) {
        _fin_requested = true;
        _close_after_fin = true;
        transmit();
        _close_timer.set_callback([this] { close(closed_error()); });
        _close_timer.arm(std::chrono::seconds(5));
        return;
    }
    close(closed_error());
}

conn_params connection_impl::local_params() const noexcept {
    conn_params p;
    p.recv_buffer_size = uint32_t(_srq->buffer_size());
    p.credits = uint16_t(_credits.window());
    p.ctrl_credits = uint16_t(_opts.ctrl_credits);
    p.region = _opts.region;
    return p;
}

void connection_impl::create_qp() {
    ibv_qp_init_attr a{};
    a.send_cq = _cq;
    a.recv_cq = _cq;
    a.srq = _srq->srq();
    a.qp_type = IBV_QPT_RC;
    a.sq_sig_all = 0;
    a.cap.max_send_wr = _ring.depth();
    // A message's pieces (header, payload) go out as one SEND: several entries, as many as
    // the device allows (rxe: 32) up to max_send_gather.
    a.cap.max_send_sge = std::clamp(_ctx->dev().capabilities().max_send_sge, 1u, max_send_gather);
    a.cap.max_recv_wr = 0;
    a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = _max_inline;
    if (rdma_create_qp(_id, _ctx->qp_pd(), &a) != 0) {
        const int err = errno;
        // What librdmacm and the kernel check, for a failure that is otherwise only "EINVAL": the
        // id's device context against the PD's, a QP already on the id, the CQ's size.
        throw rdma_error(errno_text(
            fmt::format("rdma_create_qp (send queue {}, {} send SGEs, inline {}; id on {} device context, "
                        "{}CQ of {} entries, {} connections on the shard)",
                        _ring.depth(), a.cap.max_send_sge, _max_inline,
                        _id->verbs == _ctx->qp_pd()->context ? "the PD's" : "ANOTHER",
                        _id->qp ? "a QP already on the id, " : "", _cq->cqe, _ctx->stats().connections),
            err));
    }
    _qp = _id->qp;
    _max_inline = a.cap.max_inline_data;
    _max_sge = std::clamp(a.cap.max_send_sge, 1u, max_send_gather);
    _ctx->register_qp(_qp->qp_num, this);
    _qp_registered = true;
    // Receives for what the peer may send right away: its credits and control credits.
    unsigned want = _credits.window() + _opts.ctrl_credits;
    unsigned got = _srq->reserve(want, true);
    if (got < want) {
        _srq->release(got);
        // (Short: the reason travels in the reject's private data.)
        throw connection_error(
            fmt::format("shard {}: no receive buffers for another connection ({} of {}; pool "
                        "at its watermark or SRQ full)",
                        _shard, got, want));
    }
    _credits.grant_initial();
}

future<std::shared_ptr<connection_ref>> connection_impl::start_connect(const net::socket_address& to) {
    _peer_addr = to;
    _connect_promise.emplace();
    auto f = _connect_promise->get_future();
    if ((to.family() == AF_INET &&
         (ntohl(reinterpret_cast<const sockaddr_in*>(to.as_sockaddr())->sin_addr.s_addr) >> 24) == 127) ||
        (to.family() == AF_INET6 &&
         IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(to.as_sockaddr())->sin6_addr))) {
        fail_setup(
            "a loopback address cannot be reached over RDMA: connect to the RDMA device's own address" +
            (_ctx->dev().ipv4_address().empty() ? std::string() : " (" + _ctx->dev().ipv4_address() + ")"));
        return f;
    }
    net::socket_address src;
    bool have_src = false;
    try {
        if (!_opts.local_address.empty()) {
            src = net::socket_address::parse(_opts.local_address, 0);
            have_src = true;
        } else if (!_ctx->dev().ipv4_address().empty() && to.family() == AF_INET) {
            src = net::socket_address::parse(_ctx->dev().ipv4_address(), 0);
            have_src = true;
        }
    } catch (const std::exception& e) {
        fail_setup(std::string("bad local address: ") + e.what());
        return f;
    }
    if (rdma_resolve_addr(_id, have_src ? src.as_sockaddr() : nullptr,
                          const_cast<sockaddr*>(to.as_sockaddr()), int(_opts.resolve_timeout.count())) != 0) {
        fail_setup(errno_text("rdma_resolve_addr", errno));
    }
    return f;
}

rdma_conn_param connection_impl::cm_params(const std::array<uint8_t, conn_params_size>& pdata,
                                           int max_responder_resources,
                                           int max_initiator_depth) const noexcept {
    const auto& attr = _ctx->dev().attributes().orig_attr;
    rdma_conn_param p{};
    p.private_data = pdata.data();
    p.private_data_len = uint8_t(pdata.size());
    p.responder_resources = uint8_t(std::min({max_responder_resources, attr.max_qp_rd_atom, 16}));
    p.initiator_depth = uint8_t(std::min({max_initiator_depth, attr.max_qp_init_rd_atom, 16}));
    p.retry_count = 7;
    p.rnr_retry_count = 0; // credits make RNR impossible
    return p;
}

void connection_impl::accept(const conn_params& peer, const cm_event& request, acceptor* a) {
    _peer = peer;
    _credits.add_send_credits(peer.credits); // none yet: nothing was received
    _credits.add_ctrl_credits(peer.ctrl_credits);
    _peer_addr = address_of(rdma_get_peer_addr(_id));
    create_qp();
    auto pdata = encode_conn_params(local_params());
    // Never more READ/atomic depth than the requester offers.
    rdma_conn_param p = cm_params(pdata, request.initiator_depth, request.responder_resources);
    if (rdma_accept(_id, &p) != 0) {
        throw connection_error(errno_text("rdma_accept", errno));
    }
    _acceptor = a;
}

void connection_impl::on_cm_event(const cm_event& ev) noexcept {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    cm_log.debug("connection {} ({}): {} (status {})", fmt::ptr(this), _peer_addr.to_string(),
                 rdma_event_str(ev.type), ev.status);
    switch (ev.type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (_state != state::resolving) {
            // Closed while the address resolved (an abort, the setup timeout): the id still
            // reports the step it had started; go no further (the id is freed with the QP).
            break;
        }
        if (_id->verbs != _ctx->dev().context()) {
            fail_setup(fmt::format("the address resolves to RDMA device {}, but shoal uses {}",
                                   _id->verbs ? ibv_get_device_name(_id->verbs->device) : "(none)",
                                   _ctx->dev().name()));
        } else if (rdma_resolve_route(_id, int(_opts.resolve_timeout.count())) != 0) {
            fail_setup(errno_text("rdma_resolve_route", errno));
        }
        break;
    case RDMA_CM_EVENT_ADDR_ERROR:
        fail_setup("address resolution failed: " + status_text(ev.status));
        break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        if (_state != state::resolving) {
            break; // closed meanwhile: a route resolved now must not connect
        }
        try {
            create_qp();
            auto pdata = encode_conn_params(local_params());
            rdma_conn_param p = cm_params(pdata, 16, 16);
            if (rdma_connect(_id, &p) != 0) {
                throw connection_error(errno_text("rdma_connect", errno));
            }
            _state = state::connecting;
        } catch (const std::exception& e) {
            fail_setup(e.what());
        }
        break;
    case RDMA_CM_EVENT_ROUTE_ERROR:
        fail_setup("route resolution failed: " + status_text(ev.status));
        break;
    case RDMA_CM_EVENT_UNREACHABLE:
        fail_setup("peer unreachable (" + status_text(ev.status) + ")");
        break;
    case RDMA_CM_EVENT_REJECTED: {
        if (_state == state::established) {
            // The passive side tore the connection down before its CM took this side's RTU
            // (it cut us off early, e.g. for a protocol error): its CM answers with a REJ, which
            // ends a connection this side already saw established. The peer closed it.
            on_disconnected();
            break;
        }
        auto reason = decode_reject_reason(ev.pdata());
        fail_setup(reason ? "rejected by the peer: " + *reason : reject_text(ev.status));
        break;
    }
    case RDMA_CM_EVENT_CONNECT_ERROR:
        fail_setup("connection error (" + status_text(ev.status) + ")");
        break;
    case RDMA_CM_EVENT_ESTABLISHED:
        established(ev);
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
        if (_state == state::established) {
            on_disconnected();
        } else {
            fail_setup("disconnected during setup");
        }
        break;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        close(std::make_exception_ptr(connection_closed("the RDMA device was removed")));
        break;
    default:
        break;
    }
}

void connection_impl::established(const cm_event& ev) noexcept {
    if (_state != state::connecting) {
        return;
    }
    if (_active) {
        std::string err;
        auto p = decode_conn_params(ev.pdata(), err);
        if (!p) {
            fail_setup(err);
            return;
        }
        _peer = *p;
        _credits.add_send_credits(p->credits); // credits the peer may already have returned stay
        _credits.add_ctrl_credits(p->ctrl_credits);
    }
    _setup_timer.cancel();
    _state = state::established;
    _was_established = true;
    _local_addr = address_of(rdma_get_local_addr(_id));
    _peer_addr = address_of(rdma_get_peer_addr(_id));
    if (_active) {
        auto pr = std::move(*_connect_promise);
        _connect_promise.reset();
        _setup_abort = {};
        pr.set_value(make_ref());
    } else if (_acceptor) {
        acceptor* a = std::exchange(_acceptor, nullptr);
        a->deliver(this);
    } else {
        close(std::make_exception_ptr(
            connection_closed("the listener closed before the connection was set up")));
        return;
    }
    if (!_rx.empty() || _credits.credits_to_return()) {
        need_post();
    }
    transmit();
}

void connection_impl::fail_setup(const std::string& why) noexcept {
    if (_state == state::closing || _state == state::closed) {
        return;
    }
    auto ex = std::make_exception_ptr(connection_error(
        fmt::format("rdma {} {}: {}", _active ? "connect to" : "accept from", _peer_addr.to_string(), why)));
    if (!_active) {
        cm_log.debug("{}", fmt::format("accept from {} failed: {}", _peer_addr.to_string(), why));
    }
    close(ex); // fails the connect promise or tells the acceptor, with `ex`
}

void connection_impl::on_disconnected() noexcept {
    // Take what the peer sent before it left (its data and end of stream) before closing.
    _ctx->drain_cq();
    close(std::make_exception_ptr(
        connection_closed("RDMA connection to " + _peer_addr.to_string() + " closed by the peer")));
}

void connection_impl::close(std::exception_ptr why) noexcept {
    if (_state == state::closing || _state == state::closed) {
        return;
    }
    if (!_error) {
        _error = why ? why : closed_error();
    }
    _setup_timer.cancel();
    _close_timer.cancel();
    state was = _state;
    _state = state::closing;
    cm_log.debug("connection {} ({}): closing: {}", fmt::ptr(this), _peer_addr.to_string(), _error);
    if (was == state::established || was == state::connecting) {
        rdma_disconnect(_id); // sends DREQ and moves the QP to the error state (flushes)
        _disconnect_sent = true;
    }
    if (_qp) {
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_ERR;
        ibv_modify_qp(_qp, &attr, IBV_QP_STATE);
    }
    if (_connect_promise) {
        auto pr = std::move(*_connect_promise);
        _connect_promise.reset();
        _setup_abort = {};
        pr.set_exception(_error);
    }
    if (_acceptor) {
        std::exchange(_acceptor, nullptr)->connection_failed(this);
    }
    fail_unposted();
    fail_send_waiters();
    // Completions already queued for this connection (in a CQ, or behind the one being
    // dispatched) happened before the failure: deliver them (a ring's last doorbells, messages)
    // before the receivers learn of it. Inside a dispatch that waits for the end of the poll
    // (destroy_resources), which is before any task runs.
    if (_ctx->dispatching()) {
        _fail_receivers_at_reap = true;
    } else {
        _ctx->drain_cq();
        fail_receive_waiters();
    }
    // The QP is freed at the end of this poll. Requests it executed unsignaled never complete
    // (the error state flushes only unexecuted ones), so there is nothing to wait for: once the
    // QP is destroyed and the CQ drained, whatever is still outstanding is retired.
    if (!_destroy_queued) {
        _destroy_queued = true;
        _ctx->destroy_later(this);
    }
}

void connection_impl::on_qp_event(ibv_event_type type) noexcept {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    switch (type) {
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        _last_wqe = true;
        if (_awaiting_last_wqe) {
            _close_timer.cancel();
            _ctx->count_last_wqe(true);
            _last_wqe_wait_over = true;
            _ctx->destroy_later(this);
        }
        break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
        close(std::make_exception_ptr(
            connection_closed(fmt::format("RDMA connection to {}: the device reported {} on its QP",
                                          _peer_addr.to_string(), ibv_event_type_str(type)))));
        break;
    default:
        break;
    }
}

void connection_impl::destroy_resources() noexcept {
    if (_resources_gone) {
        return;
    }
    if (_fail_receivers_at_reap) {
        _fail_receivers_at_reap = false;
        _ctx->drain_cq();
        fail_receive_waiters();
    }
    if (_qp && _was_established && !_last_wqe && !_last_wqe_wait_over) {
        // The QP is in the error state (close): wait until the device is done with its shared
        // receives, bounded (rxe, for one, never reports it).
        if (!_awaiting_last_wqe) {
            _awaiting_last_wqe = true;
            _close_timer.set_callback([this] {
                _ctx->count_last_wqe(false);
                _last_wqe_wait_over = true;
                _ctx->destroy_later(this);
            });
            _close_timer.arm(_opts.last_wqe_timeout);
        }
        return;
    }
    _close_timer.cancel();
    _resources_gone = true;
    cm_log.debug("connection {} ({}): freeing its QP and id", fmt::ptr(this), _peer_addr.to_string());
    // Drain first, while the QP exists and its receives still reach this connection
    // (destroying it may discard its queued completions and with them the SRQ buffers they
    // own), then destroy it and drain what raced in.
    _ctx->drain_cq();
    if (_qp_registered) {
        _ctx->unregister_qp(_qp->qp_num);
        _qp_registered = false;
    }
    if (_qp) {
        rdma_destroy_qp(_id);
        _qp = nullptr;
    }
    // No completion can name the QP now; take those still queued (receives find no owner,
    // sends retire their slots), then retire what never completed.
    _ctx->drain_cq();
    while (send_slot* s = _ring.retire_oldest()) {
        finish_slot(*s, s->signaled ? IBV_WC_WR_FLUSH_ERR : IBV_WC_SUCCESS, nullptr);
    }
    _srq->release(_credits.release_all());
    _ctx->release_receive_queue(*_srq); // its QP is gone, the CQs drained
    _srq = nullptr;
    if (_id) {
        _id->context = nullptr;
        rdma_destroy_id(_id);
        _id = nullptr;
    }
    // Received data and immediates stay readable until the user drops the connection.
    _tx.clear();
    _msgs.clear();
    _tx_bytes = 0;
    _atomics.reset();
    if (_in_context) {
        _ctx->remove_connection(this, _cq, _ring.depth());
        _in_context = false;
    }
    _state = state::closed;
    if (_user_refs == 0) {
        delete this;
    }
}

} // namespace shoal::net::rdma::internal
