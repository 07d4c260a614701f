#include "net/rdma/receive_queue.hh"

#include "core/log.hh"
#include "net/rdma/error.hh"

#include <cerrno>
#include <cstring>

namespace shoal::net::rdma::internal {

namespace {
logger rq_log("rdma");
} // namespace

shared_receive_queue::shared_receive_queue(ibv_pd* pd, memory_pool& pool, unsigned max_wr, size_t buffer_size,
                                           receive_sink& sink, unsigned slack, receive_budget& budget)
    : _pool(pool)
    , _max_wr(max_wr)
    , _buffer_size(buffer_size)
    , _sink(sink)
    , _budget(budget)
    , _slack(std::min(slack, max_wr / 2)) {
    if (buffer_size > pool.max_buffer_size()) {
        throw rdma_error("receive buffers of " + std::to_string(buffer_size) +
                         " bytes exceed the largest pool buffer (" + std::to_string(pool.max_buffer_size()) +
                         ")");
    }
    ibv_srq_init_attr attr{};
    attr.attr.max_wr = max_wr;
    attr.attr.max_sge = 1;
    _srq = ibv_create_srq(pd, &attr);
    if (!_srq) {
        throw_errno("ibv_create_srq(" + std::to_string(max_wr) + " receives)", errno);
    }
    _max_wr = std::min(max_wr, attr.attr.max_wr ? attr.attr.max_wr : max_wr);
    try {
        _slots = std::make_unique<slot[]>(_max_wr);
    } catch (...) {
        ibv_destroy_srq(_srq); // the destructor does not run for a constructor that throws
        throw;
    }
    for (unsigned i = _max_wr; i-- > 0;) {
        _slots[i].q = this;
        _slots[i].next_free = _free;
        _free = &_slots[i];
    }
}

shared_receive_queue::~shared_receive_queue() {
    if (int rc = ibv_destroy_srq(_srq); rc != 0) {
        rq_log.error("ibv_destroy_srq: {}", std::strerror(rc));
    }
    // Destroying the SRQ discarded the posted receives: their buffers go back to the pool.
    _budget.posted -= std::min(_posted, _budget.posted);
    for (unsigned i = 0; i < _max_wr; ++i) {
        _slots[i].buf.reset();
    }
}

bool shared_receive_queue::post(slot& s) noexcept {
    ibv_sge sge{reinterpret_cast<uintptr_t>(s.buf.data()), uint32_t(_buffer_size), s.buf.lkey()};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id_of(&s);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (int rc = ibv_post_srq_recv(_srq, &wr, &bad); rc != 0) {
        rq_log.error("ibv_post_srq_recv: {}", std::strerror(rc));
        return false;
    }
    ++_posted;
    ++_budget.posted;
    return true;
}

unsigned shared_receive_queue::post_new(unsigned n, bool optional) noexcept {
    // Chained: one ibv_post_srq_recv per batch of up to 16 receives.
    constexpr unsigned batch = 16;
    // The shard's other SRQs share the CQ room for receives.
    n = std::min(n, _budget.limit > _budget.posted ? _budget.limit - _budget.posted : 0u);
    unsigned done = 0;
    while (done < n && _free) {
        ibv_recv_wr wrs[batch];
        ibv_sge sges[batch];
        slot* taken[batch];
        unsigned k = 0;
        while (k < batch && done + k < n && _free) {
            slot* s = _free;
            s->buf = _pool.try_allocate(_buffer_size, optional);
            if (!s->buf) {
                break;
            }
            _free = s->next_free;
            taken[k] = s;
            sges[k] =
                ibv_sge{reinterpret_cast<uintptr_t>(s->buf.data()), uint32_t(_buffer_size), s->buf.lkey()};
            wrs[k] = ibv_recv_wr{};
            wrs[k].wr_id = wr_id_of(s);
            wrs[k].sg_list = &sges[k];
            wrs[k].num_sge = 1;
            if (k > 0) {
                wrs[k - 1].next = &wrs[k];
            }
            ++k;
        }
        if (k == 0) {
            break;
        }
        ibv_recv_wr* bad = nullptr;
        unsigned posted = k;
        if (int rc = ibv_post_srq_recv(_srq, wrs, &bad); rc != 0) {
            rq_log.error("ibv_post_srq_recv: {}", std::strerror(rc));
            posted = unsigned(bad - wrs);
        }
        for (unsigned i = posted; i < k; ++i) {
            taken[i]->buf.reset();
            taken[i]->next_free = _free;
            _free = taken[i];
        }
        _posted += posted;
        _budget.posted += posted;
        done += posted;
        if (posted < k) {
            break;
        }
    }
    return done;
}

unsigned shared_receive_queue::reserve(unsigned n, bool optional) noexcept {
    if (_posted < _committed + n) {
        post_new(_committed + n - _posted, optional);
    }
    unsigned spare = _posted > _committed ? _posted - _committed : 0;
    unsigned got = std::min(n, spare);
    _committed += got;
    return got;
}

void shared_receive_queue::release(unsigned n) noexcept {
    _committed -= std::min(n, _committed);
}

void shared_receive_queue::on_complete(slot& s, const ibv_wc& wc) noexcept {
    --_posted;
    --_budget.posted;
    _sink.on_receive(wc, s.buf);
    if (s.buf && wc.status == IBV_WC_SUCCESS && _posted < _committed + _slack) {
        // Left here (a credit-only message, an immediate, or data nobody reads): reuse it.
        if (post(s)) {
            return;
        }
    }
    s.buf.reset();
    s.next_free = _free;
    _free = &s;
}

void shared_receive_queue::arm_limit() noexcept {
    if (!_limit_supported || _slack < 2) {
        return;
    }
    ibv_srq_attr attr{};
    attr.srq_limit = _slack / 2;
    if (int rc = ibv_modify_srq(_srq, &attr, IBV_SRQ_LIMIT); rc != 0) {
        rq_log.debug("ibv_modify_srq(limit {}): {}; no SRQ limit events", attr.srq_limit, std::strerror(rc));
        _limit_supported = false;
    }
}

void shared_receive_queue::refill() noexcept {
    if (_posted < _committed + _slack) {
        post_new(_committed + _slack - _posted, false);
    }
    arm_limit();
}

} // namespace shoal::net::rdma::internal
