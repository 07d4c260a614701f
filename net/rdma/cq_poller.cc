#include "net/rdma/cq_poller.hh"

#include "core/log.hh"
#include "net/rdma/completion.hh"
#include "net/rdma/error.hh"

#include <cerrno>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <fmt/format.h>

namespace shoal::net::rdma::internal {

namespace {
logger cq_log("rdma");
constexpr unsigned ack_batch = 64;
} // namespace

cq_poller::cq_poller(ibv_context* ctx, unsigned entries, unsigned receive_entries, unsigned max_entries,
                     unsigned batch, hooks& h)
    : _ctx(ctx)
    , _receive_entries(receive_entries)
    , _max_entries(max_entries ? max_entries : ~0u)
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
    _cqs.reserve(8);
    try {
        create(std::min(std::max(entries, receive_entries + 1), _max_entries));
    } catch (...) {
        ibv_destroy_comp_channel(_channel);
        throw;
    }
    _watcher = std::make_unique<fd_watcher>(_channel->fd, [this] { on_channel_readable(); });
}

cq_poller::~cq_poller() {
    for (queue& q : _cqs) {
        ack_events(q);
        if (int rc = ibv_destroy_cq(q.cq); rc != 0) {
            cq_log.error("ibv_destroy_cq: {}", std::strerror(rc));
        }
    }
    if (int rc = ibv_destroy_comp_channel(_channel); rc != 0) {
        cq_log.error("ibv_destroy_comp_channel: {}", std::strerror(rc));
    }
}

ibv_cq* cq_poller::create(unsigned entries) {
    if (entries <= _receive_entries) {
        throw rdma_error(fmt::format("a completion queue of {} entries cannot hold the {} the shared receive "
                                     "queue needs (device limit {})",
                                     entries, _receive_entries + 1, _max_entries));
    }
    // The CQ's context is its index: the channel event names the CQ to re-arm.
    ibv_cq* cq =
        ibv_create_cq(_ctx, int(entries), reinterpret_cast<void*>(uintptr_t(_cqs.size())), _channel, 0);
    if (!cq) {
        throw_errno(fmt::format("ibv_create_cq({} entries, CQ {} of the shard)", entries, _cqs.size() + 1),
                    errno);
    }
    _cqs.push_back(queue{cq, _receive_entries, 0, false});
    if (_cqs.size() > 1) {
        cq_log.debug("{} completion queues on the shard ({} entries each at most)", _cqs.size(),
                     _max_entries);
    }
    return cq;
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

unsigned cq_poller::capacity() const noexcept {
    unsigned n = 0;
    for (const queue& q : _cqs) {
        n += unsigned(q.cq->cqe);
    }
    return n;
}

cq_stats cq_poller::stats() const noexcept {
    cq_stats s = _stats;
    s.cqs = _cqs.size();
    for (const queue& q : _cqs) {
        s.entries += unsigned(q.cq->cqe);
        s.reserved += q.reserved;
    }
    return s;
}

ibv_cq* cq_poller::reserve(unsigned entries) {
    // A CQ with room.
    for (queue& q : _cqs) {
        if (q.reserved + entries <= unsigned(q.cq->cqe)) {
            q.reserved += entries;
            return q.cq;
        }
    }
    // One that can grow (doubling, within the device's limit).
    std::string why;
    for (queue& q : _cqs) {
        unsigned need = q.reserved + entries;
        if (need > _max_entries) {
            continue;
        }
        unsigned want = std::min(std::max(need, unsigned(q.cq->cqe) * 2), _max_entries);
        int rc = ibv_resize_cq(q.cq, int(want));
        if (rc != 0 && want != need) {
            rc = ibv_resize_cq(q.cq, int(need)); // some providers cap the size below max_cqe
        }
        if (rc == 0 && unsigned(q.cq->cqe) >= need) {
            ++_stats.resizes;
            q.reserved = need;
            return q.cq;
        }
        if (rc != 0) {
            why = errno_text(fmt::format("ibv_resize_cq to {} entries", need), rc);
        }
    }
    // Another CQ on the same channel.
    try {
        unsigned size =
            std::min(std::max(unsigned(_cqs.front().cq->cqe), _receive_entries + entries), _max_entries);
        if (_receive_entries + entries > size) {
            throw rdma_error(
                fmt::format("a send queue of {} entries does not fit a completion queue of at most "
                            "{} beside the {} receives",
                            entries, _max_entries, _receive_entries));
        }
        ibv_cq* cq = create(size);
        _cqs.back().reserved += entries;
        return cq;
    } catch (const rdma_error& e) {
        throw rdma_error(why.empty() ? std::string(e.what()) : why + "; then " + e.what());
    }
}

void cq_poller::unreserve(ibv_cq* cq, unsigned entries) noexcept {
    for (queue& q : _cqs) {
        if (q.cq == cq) {
            q.reserved -= std::min(q.reserved - std::min(q.reserved, _receive_entries), entries);
            return;
        }
    }
}

// Inlined into `poll`, `drain` and `try_arm`: one call less per poll.
[[gnu::always_inline]] inline unsigned cq_poller::poll_batch(queue& q) noexcept {
    int n = ibv_poll_cq(q.cq, int(_batch), _wcs.data());
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
    unsigned total = 0;
    // Index loops: a handler may add a CQ (a connection set up from inside a dispatch).
    if (_polling) {
        // Nested inside a dispatch the outer loop still holds entries of _wcs: use a local array.
        ++_polling;
        ibv_wc local[16];
        for (size_t c = 0; c < _cqs.size(); ++c) {
            int n;
            while ((n = ibv_poll_cq(_cqs[c].cq, 16, local)) > 0) {
                for (int i = 0; i < n; ++i) {
                    _wc_counts.count(local[i]);
                    handler_of(local[i].wr_id)->complete(local[i]);
                }
                total += unsigned(n);
            }
        }
        --_polling;
        _stats.completions += total;
        return total;
    }
    for (size_t c = 0; c < _cqs.size(); ++c) {
        unsigned n;
        while ((n = poll_batch(_cqs[c])) > 0) {
            total += n;
        }
    }
    return total;
}

bool cq_poller::poll() {
    ++_stats.polls;
    bool work = _hooks.before_poll();
    for (size_t c = 0; c < _cqs.size(); ++c) {
        // Bounded: a flood of completions must not starve the tasks they make ready.
        for (int round = 0; round < 4; ++round) {
            unsigned n = poll_batch(_cqs[c]);
            if (n == 0) {
                break;
            }
            work = true;
            if (n < _batch) {
                break;
            }
        }
    }
    work |= _hooks.after_poll();
    return work;
}

bool cq_poller::try_arm() {
    if (_hooks.before_poll()) {
        return false;
    }
    for (queue& q : _cqs) {
        if (!q.armed) {
            if (int rc = ibv_req_notify_cq(q.cq, 0); rc != 0) {
                cq_log.error("ibv_req_notify_cq: {}", std::strerror(rc));
                return false; // cannot sleep safely: keep polling
            }
            q.armed = true;
            ++_stats.arms;
        }
    }
    // A completion that arrived before the arming raised no event: look once more.
    ++_stats.polls;
    bool work = false;
    for (size_t c = 0; c < _cqs.size(); ++c) {
        work |= poll_batch(_cqs[c]) > 0;
    }
    work |= _hooks.after_poll();
    return !work;
}

void cq_poller::on_channel_readable() noexcept {
    ibv_cq* cq = nullptr;
    void* cq_ctx = nullptr;
    while (ibv_get_cq_event(_channel, &cq, &cq_ctx) == 0) {
        ++_stats.cq_events;
        size_t i = size_t(reinterpret_cast<uintptr_t>(cq_ctx));
        if (i < _cqs.size() && _cqs[i].cq == cq) {
            queue& q = _cqs[i];
            ++q.unacked;
            q.armed = false;
            if (q.unacked >= ack_batch) {
                ack_events(q);
            }
        }
    }
}

void cq_poller::ack_events(queue& q) noexcept {
    if (q.unacked) {
        ibv_ack_cq_events(q.cq, q.unacked);
        q.unacked = 0;
    }
}

} // namespace shoal::net::rdma::internal
