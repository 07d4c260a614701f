#include "net/rdma/cq_poller.hh"

#include "core/log.hh"
#include "net/rdma/completion.hh"
#include "net/rdma/error.hh"

#include <cerrno>
#include <cstring>

#include <fcntl.h>

namespace shoal::net::rdma::internal {

namespace {
logger cq_log("rdma");
constexpr unsigned ack_batch = 64;
} // namespace

cq_poller::cq_poller(ibv_context* ctx, unsigned entries, unsigned batch, hooks& h)
    : _ctx(ctx)
    , _batch(std::max(1u, batch))
    , _hooks(h)
    , _wcs(_batch) {
    _channel = ibv_create_comp_channel(_ctx);
    if (!_channel) {
        throw_errno("ibv_create_comp_channel", errno);
    }
    int flags = fcntl(_channel->fd, F_GETFL);
    if (flags < 0 || fcntl(_channel->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        int e = errno;
        ibv_destroy_comp_channel(_channel);
        throw_errno("making the completion channel non-blocking", e);
    }
    _cq = ibv_create_cq(_ctx, int(entries), nullptr, _channel, 0);
    if (!_cq) {
        int e = errno;
        ibv_destroy_comp_channel(_channel);
        throw_errno("ibv_create_cq(" + std::to_string(entries) + " entries)", e);
    }
    _watcher = std::make_unique<fd_watcher>(_channel->fd, [this] { on_channel_readable(); });
}

cq_poller::~cq_poller() {
    ack_events();
    if (int rc = ibv_destroy_cq(_cq); rc != 0) {
        cq_log.error("ibv_destroy_cq: {}", std::strerror(rc));
    }
    if (int rc = ibv_destroy_comp_channel(_channel); rc != 0) {
        cq_log.error("ibv_destroy_comp_channel: {}", std::strerror(rc));
    }
}

void cq_poller::start() {
    local_reactor().register_poller(this);
    _registered = true;
    _watcher->start();
}

future<> cq_poller::stop() {
    if (_registered) {
        local_reactor().unregister_poller(this);
        _registered = false;
    }
    return _watcher->stop();
}

void cq_poller::ensure_capacity(unsigned entries) {
    if (entries <= unsigned(_cq->cqe)) {
        return;
    }
    unsigned want = std::max(entries, unsigned(_cq->cqe) * 2);
    if (int rc = ibv_resize_cq(_cq, int(want)); rc != 0) {
        // Some providers cap the size: try the exact need before giving up.
        if (int rc2 = ibv_resize_cq(_cq, int(entries)); rc2 != 0) {
            throw rdma_error(errno_text("ibv_resize_cq to " + std::to_string(entries) + " entries", rc2));
        }
    }
    ++_stats.resizes;
}

unsigned cq_poller::poll_batch() noexcept {
    int n = ibv_poll_cq(_cq, int(_batch), _wcs.data());
    if (n <= 0) {
        if (n < 0) {
            cq_log.error("ibv_poll_cq failed: {}", n);
        }
        return 0;
    }
    ++_polling;
    for (int i = 0; i < n; ++i) {
        _wc_counts.count(_wcs[size_t(i)]);
        handler_of(_wcs[size_t(i)].wr_id)->complete(_wcs[size_t(i)]);
    }
    --_polling;
    _stats.completions += unsigned(n);
    return unsigned(n);
}

unsigned cq_poller::drain() noexcept {
    // Nested inside a dispatch the outer loop still holds entries of _wcs: use a local array.
    if (_polling) {
        unsigned total = 0;
        ibv_wc local[16];
        int n;
        while ((n = ibv_poll_cq(_cq, 16, local)) > 0) {
            for (int i = 0; i < n; ++i) {
                _wc_counts.count(local[i]);
                handler_of(local[i].wr_id)->complete(local[i]);
            }
            total += unsigned(n);
        }
        _stats.completions += total;
        return total;
    }
    unsigned total = 0;
    unsigned n;
    while ((n = poll_batch()) > 0) {
        total += n;
    }
    return total;
}

bool cq_poller::poll() {
    ++_stats.polls;
    bool work = _hooks.before_poll();
    // Bounded: a flood of completions must not starve the tasks they make ready.
    for (int round = 0; round < 4; ++round) {
        unsigned n = poll_batch();
        if (n == 0) {
            break;
        }
        work = true;
        if (n < _batch) {
            break;
        }
    }
    work |= _hooks.after_poll();
    return work;
}

bool cq_poller::try_arm() {
    if (_hooks.before_poll()) {
        return false;
    }
    if (!_armed) {
        if (int rc = ibv_req_notify_cq(_cq, 0); rc != 0) {
            cq_log.error("ibv_req_notify_cq: {}", std::strerror(rc));
            return false; // cannot sleep safely: keep polling
        }
        _armed = true;
        ++_stats.arms;
    }
    // A completion that arrived before the arming raised no event: look once more.
    ++_stats.polls;
    bool work = poll_batch() > 0;
    work |= _hooks.after_poll();
    return !work;
}

void cq_poller::on_channel_readable() noexcept {
    ibv_cq* cq = nullptr;
    void* cq_ctx = nullptr;
    while (ibv_get_cq_event(_channel, &cq, &cq_ctx) == 0) {
        ++_unacked_events;
        ++_stats.cq_events;
        _armed = false;
    }
    if (_unacked_events >= ack_batch) {
        ack_events();
    }
}

void cq_poller::ack_events() noexcept {
    if (_unacked_events) {
        ibv_ack_cq_events(_cq, _unacked_events);
        _unacked_events = 0;
    }
}

} // namespace shoal::net::rdma::internal
