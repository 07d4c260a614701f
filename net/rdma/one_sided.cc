// One-sided operations of a connection, the regions they work on, and the binding and
// invalidation of memory windows.
#include "net/rdma/connection_impl.hh"
#include "net/rdma/context.hh"
#include "net/rdma/error.hh"
#include "net/rdma/immediates.hh"
#include "net/rdma/memory_region.hh"

#include <cassert>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <arpa/inet.h>
#include <fmt/format.h>

namespace shoal::net::rdma {

// --- regions

namespace {
/// The ibv_access_flags of `a`'s remote rights.
int remote_access_flags(access a) noexcept {
    int flags = 0;
    if (has(a, access::remote_read)) {
        flags |= IBV_ACCESS_REMOTE_READ;
    }
    if (has(a, access::remote_write)) {
        flags |= IBV_ACCESS_REMOTE_WRITE;
    }
    if (has(a, access::remote_atomic)) {
        flags |= IBV_ACCESS_REMOTE_ATOMIC;
    }
    return flags;
}
} // namespace

memory_region& memory_region::operator=(memory_region&& o) noexcept {
    if (this != &o) {
        deregister();
        _mr = std::exchange(o._mr, nullptr);
        _shard = o._shard;
        _data = o._data;
        _size = o._size;
        _lkey = o._lkey;
        _rkey = o._rkey;
    }
    return *this;
}

void memory_region::deregister() noexcept {
    if (_mr) {
        SHOAL_RDMA_CHECK_SHARD(_shard, "memory region");
        ibv_dereg_mr(std::exchange(_mr, nullptr));
    }
}

local_span memory_region::span(size_t offset, size_t len) const {
    if (offset > size() || len > size() - offset || len > UINT32_MAX) {
        throw std::out_of_range(
            fmt::format("span of {} bytes at offset {} of a {}-byte memory region", len, offset, size()));
    }
    return {data() + offset, uint32_t(len), lkey()};
}

void internal::throw_bad_span(const buffer& b, size_t offset, size_t len) {
    throw std::out_of_range(fmt::format("span of {} bytes at offset {} of a {}-byte pool buffer", len, offset,
                                        b ? b.capacity() : 0));
}

memory_region register_memory(void* addr, size_t len, access a) {
    shard_context& ctx = shard_context::local();
    int flags = IBV_ACCESS_LOCAL_WRITE | remote_access_flags(a);
    if (has(a, access::mw_bind)) {
        flags |= IBV_ACCESS_MW_BIND;
    }
    internal::count_registration();
    ibv_mr* mr = ibv_reg_mr(ctx.pd(), addr, len, flags);
    if (!mr) {
        internal::throw_errno(fmt::format("ibv_reg_mr of {} bytes at {}", len, addr), errno);
    }
    memory_region r;
    r._mr = mr;
    r._shard = ctx.shard();
    r._data = static_cast<char*>(mr->addr);
    r._size = mr->length;
    r._lkey = mr->lkey;
    r._rkey = mr->rkey;
    return r;
}

exported_region export_region(void* addr, size_t len, access a) {
    if (a == access::none) {
        throw std::invalid_argument("export_region: grant at least one remote access right");
    }
    return exported_region(register_memory(addr, len, a));
}

exported_region export_region(const buffer& b, access a, size_t offset, size_t len) {
    if (!b) {
        throw std::invalid_argument("export_region: empty buffer");
    }
    if (len == size_t(-1)) {
        len = offset <= b.capacity() ? b.capacity() - offset : 0;
    }
    if (offset > b.capacity() || len > b.capacity() - offset) {
        throw std::out_of_range(fmt::format("export_region: {} bytes at offset {} of a {}-byte buffer", len,
                                            offset, b.capacity()));
    }
    if (a == access::none) {
        throw std::invalid_argument("export_region: grant at least one remote access right");
    }
    return exported_region(register_memory(b.data() + offset, len, a), b.hold());
}

} // namespace shoal::net::rdma

namespace shoal::net::rdma::internal {

std::exception_ptr connection_impl::check(one_sided_op::kind what, uint64_t length, remote_region rr,
                                          uint64_t offset) const {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    if (!usable()) {
        return _error ? _error : closed_error();
    }
    const one_sided_op op{.what = what};
    if (offset > rr.length || length > rr.length - offset) {
        return std::make_exception_ptr(std::out_of_range(
            fmt::format("RDMA {} of {} bytes at offset {} is outside the remote region of {} bytes",
                        op.name(), length, offset, rr.length)));
    }
    if (op.atomic() && (rr.addr + offset) % 8) {
        return std::make_exception_ptr(std::invalid_argument("RDMA atomics need an 8-byte aligned address"));
    }
    return nullptr;
}

template <typename T, typename Issue>
future<T> connection_impl::start_op(bool needs_credit, Issue issue) {
    if (must_wait(needs_credit)) {
        return wait_turn(needs_credit).then(std::move(issue));
    }
    return issue();
}

template <typename T, typename Issue>
future<T> connection_impl::start_abortable(abort_source& as, bool needs_credit, Issue issue) {
    if (as.abort_requested()) {
        return make_exception_future<T>(as.abort_exception());
    }
    // The caller's future is settled by the operation's result or by the abort, whichever comes
    // first. A posted operation cannot be taken back (verbs has no such call): it runs to its
    // completion, its send slot holding its memory until then.
    struct race {
        promise<T> pr;
        abort_source::subscription sub;
        std::exception_ptr aborted;
        bool settled = false;
    };
    auto r = std::make_shared<race>();
    future<T> f =
        must_wait(needs_credit)
            ? wait_turn(needs_credit)
                  .then([this, r, needs_credit, hold = make_ref(), issue = std::move(issue)]() mutable {
                      if (r->aborted) {
                          // Aborted while queued: never posted; its turn goes to the next one.
                          take_turn(needs_credit);
                          serve_senders();
                          return make_exception_future<T>(r->aborted);
                      }
                      return issue();
                  })
            : issue();
    if (f.available()) {
        return f;
    }
    r->sub = as.subscribe([r](const std::exception_ptr& ex) {
        if (!r->settled) {
            r->settled = true;
            r->aborted = ex;
            r->pr.set_exception(ex);
        }
    });
    auto out = r->pr.get_future();
    (void)std::move(f).then_wrapped([r](future<T> res) {
        r->sub = {};
        if (r->settled) {
            res.ignore_ready_future(); // the caller got the abort already
            return;
        }
        r->settled = true;
        std::move(res).forward_to(std::move(r->pr));
    });
    return out;
}

uint64_t* connection_impl::atomic_result(const send_slot& s) noexcept {
    return reinterpret_cast<uint64_t*>(_atomics.data() + (s.seq % _ring.depth()) * sizeof(uint64_t));
}

// The slot kinds follow one_sided_op's kinds in order.
static_assert(uint8_t(send_slot::op::write) - uint8_t(send_slot::op::read) ==
              uint8_t(one_sided_op::kind::write));
static_assert(uint8_t(send_slot::op::write_imm) - uint8_t(send_slot::op::read) ==
              uint8_t(one_sided_op::kind::write_imm));
static_assert(uint8_t(send_slot::op::fetch_add) - uint8_t(send_slot::op::read) ==
              uint8_t(one_sided_op::kind::fetch_add));
static_assert(uint8_t(send_slot::op::compare_swap) - uint8_t(send_slot::op::read) ==
              uint8_t(one_sided_op::kind::compare_swap));

// Inlined into `issue` and the `op_completion` form of `start`: one call less per operation,
// which the emulated guest charges more than the instructions (see
// docs/performance-history.md, "Calls, not instructions"). Where the kind is known at the call
// (`rdma::connection`'s methods), the branches on it fold away.
[[gnu::always_inline]] inline send_slot& connection_impl::prepare(const one_sided_op& op) noexcept {
    send_slot& s = _ring.next_slot();
    s.kind = send_slot::op(uint8_t(send_slot::op::read) + uint8_t(op.what));
    s.signaled = true;
    ++_stats.one_sided_ops;
    if (op.atomic()) {
        s.sge = ibv_sge{reinterpret_cast<uintptr_t>(atomic_result(s)), 8, _atomics.lkey()};
        s.wr.opcode = op.what == one_sided_op::kind::fetch_add ? IBV_WR_ATOMIC_FETCH_AND_ADD
                                                               : IBV_WR_ATOMIC_CMP_AND_SWP;
        s.wr.wr.atomic.remote_addr = op.remote.addr + op.offset;
        s.wr.wr.atomic.rkey = op.remote.rkey;
        s.wr.wr.atomic.compare_add = op.operand;
        s.wr.wr.atomic.swap = op.swap;
        return s;
    }
    const local_span& local = op.local;
    s.sge = ibv_sge{reinterpret_cast<uintptr_t>(local.addr), local.length, local.lkey};
    if (local.length == 0) {
        s.wr.num_sge = 0;
    }
    // The slot holds the span's pool memory until the completion (a flush at teardown included),
    // so an abandoned or aborted operation never lands in memory handed out again.
    if (local.hold) {
        s.held.hold(memory_hold(local.hold).into_temporary_buffer(local.addr, local.length));
    }
    s.wr.wr.rdma.remote_addr = op.remote.addr + op.offset;
    s.wr.wr.rdma.rkey = op.remote.rkey;
    if (op.what == one_sided_op::kind::read) {
        s.wr.opcode = IBV_WR_RDMA_READ;
        return s;
    }
    s.wr.opcode = IBV_WR_RDMA_WRITE;
    if (op.what == one_sided_op::kind::write_imm) {
        s.wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        s.wr.imm_data = htonl(op.imm);
        _credits.use_send_credit(); // it consumes one of the peer's receives
    }
    if (local.length <= _max_inline && local.length > 0) {
        s.wr.send_flags |= IBV_SEND_INLINE;
    }
    return s;
}

template <typename T>
future<T> connection_impl::issue(const one_sided_op& op) {
    take_turn(op.needs_credit());
    if constexpr (std::is_void_v<T>) {
        send_slot& s = prepare(op);
        s.done = promise<>();
        auto f = s.done.get_future();
        append(s);
        return f;
    } else {
        if (!_atomics) {
            _atomics = _ctx->pool().try_allocate(size_t(_ring.depth()) * sizeof(uint64_t));
            if (!_atomics) {
                return make_exception_future<uint64_t>(pool_exhausted("no pool memory for atomic results"));
            }
        }
        send_slot& s = prepare(op);
        s.value = promise<uint64_t>();
        auto f = s.value.get_future();
        append(s);
        return f;
    }
}

// The three forms, inlined into `rdma::connection`'s methods (below): one call per operation
// from the caller to the connection, as when these were the connection's inline bodies.
template <typename T>
[[gnu::always_inline]] inline future<T> connection_impl::start(one_sided_op op) {
    if (auto ex = check(op)) {
        return make_exception_future<T>(ex);
    }
    const bool needs_credit = op.needs_credit();
    return start_op<T>(needs_credit, [this, op = std::move(op)] { return issue<T>(op); });
}

template <typename T>
[[gnu::always_inline]] inline future<T> connection_impl::start(one_sided_op op, abort_source& as) {
    if (auto ex = check(op)) {
        return make_exception_future<T>(ex);
    }
    const bool needs_credit = op.needs_credit();
    return start_abortable<T>(as, needs_credit, [this, op = std::move(op)] { return issue<T>(op); });
}

void connection_impl::complete_when_ready(future<> f, op_completion& done) noexcept {
    if (f.available()) {
        done.complete(f.failed() ? f.get_exception() : nullptr);
        return;
    }
    (void)std::move(f).then_wrapped(
        [&done](future<> r) { done.complete(r.failed() ? r.get_exception() : nullptr); });
}

// Out of line, so that the `op_completion` form's fast path keeps its descriptor in registers.
[[gnu::noinline]] void connection_impl::start_behind(one_sided_op op, op_completion& done) noexcept {
    try {
        const bool needs_credit = op.needs_credit();
        complete_when_ready(
            start_op<void>(needs_credit, [this, op = std::move(op)] { return issue<void>(op); }), done);
    } catch (...) {
        done.complete(std::current_exception());
    }
}

[[gnu::always_inline]] inline void connection_impl::start(one_sided_op op, op_completion& done) noexcept {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    assert(!op.atomic()); // its previous value would have nowhere to go
    if (!usable() || op.offset > op.remote.length || op.local.length > op.remote.length - op.offset)
        [[unlikely]] {
        // A broken connection or a span outside the region: `check` says which. (The check
        // takes the facts, not `op`: `op` stays in registers on the fast path.)
        done.complete(check(op.what, op.length(), op.remote, op.offset));
        return;
    }
    const bool needs_credit = op.needs_credit();
    if (must_wait(needs_credit)) { // behind earlier operations: through the future path, at its turn
        start_behind(std::move(op), done);
        return;
    }
    // Its turn is now (nothing queued, nothing reserved): no turn to take, no promise to make.
    send_slot& s = prepare(op);
    s.notify = &done;
    append(s);
}

future<uint32_t> connection_impl::next_immediate() {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    if (_tags) {
        return make_exception_future<uint32_t>(std::logic_error(tagged_immediates_error));
    }
    if (!_imm.empty()) {
        uint32_t v = _imm.front();
        _imm.pop_front();
        consumed(1);
        return make_ready_future<uint32_t>(v);
    }
    if (_state != state::established && _state != state::connecting) {
        return make_exception_future<uint32_t>(_error ? _error : closed_error());
    }
    if (_imm_waiter) {
        return make_exception_future<uint32_t>(
            std::logic_error("next_immediate() called while another is pending"));
    }
    _imm_waiter.emplace();
    return _imm_waiter->get_future();
}

} // namespace shoal::net::rdma::internal

// --- memory windows (see memory_window.hh)

namespace shoal::net::rdma::internal {

future<remote_region> connection_impl::bind_window(memory_window& w, const ibv_mr* mr, const char* addr,
                                                   size_t len, access a) {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    if (!w || w._s->shard != _shard) {
        return make_exception_future<remote_region>(
            std::invalid_argument("bind_window: no window, or one of another shard"));
    }
    if (w.bound()) {
        return make_exception_future<remote_region>(
            std::logic_error("bind_window: the window is bound (invalidate it first)"));
    }
    auto base = static_cast<const char*>(mr->addr);
    if (addr < base || len == 0 || len > mr->length || size_t(addr - base) > mr->length - len) {
        return make_exception_future<remote_region>(std::out_of_range(
            fmt::format("bind_window: {} bytes at {} are not inside the registration of {} bytes at {}", len,
                        static_cast<const void*>(addr), mr->length, mr->addr)));
    }
    if (remote_access_flags(a) == 0) {
        return make_exception_future<remote_region>(
            std::invalid_argument("bind_window: grant at least one remote access right"));
    }
    if (!usable()) {
        return make_exception_future<remote_region>(_error ? _error : closed_error());
    }
    // From here on the window counts as bound (not reusable) until an invalidate completes,
    // whatever becomes of the bind.
    auto st = w._s;
    st->reusable = false;
    // The new key keeps the window's top 24 bits and advances the low 8 on every bind, so the
    // previous binding's rkey stops matching. mw->rkey stays the current key until the bind
    // completed (providers pass it along with the new one); the completion then records the new
    // key there (posted binds do not, and the free list keeps only the ibv_mw).
    st->bound = {reinterpret_cast<uintptr_t>(addr), ibv_inc_rkey(st->mw->rkey), len};
    return start_op<void>(false, [this, st, mr, a] { return issue_bind_window(st, mr, a); }).then([st] {
        return st->bound;
    });
}

future<> connection_impl::issue_bind_window(const std::shared_ptr<window_state>& st, const ibv_mr* mr,
                                            access a) {
    send_slot& s = prepare_window_op(send_slot::op::bind_window, st);
    s.wr.opcode = IBV_WR_BIND_MW;
    s.wr.bind_mw.mw = st->mw;
    s.wr.bind_mw.rkey = st->bound.rkey;
    s.wr.bind_mw.bind_info.mr = const_cast<ibv_mr*>(mr);
    s.wr.bind_mw.bind_info.addr = st->bound.addr;
    s.wr.bind_mw.bind_info.length = st->bound.length;
    s.wr.bind_mw.bind_info.mw_access_flags = unsigned(remote_access_flags(a));
    return post_window_op(s);
}

send_slot& connection_impl::prepare_window_op(send_slot::op kind,
                                              const std::shared_ptr<window_state>& st) noexcept {
    take_turn(false);
    send_slot& s = _ring.next_slot();
    s.kind = kind;
    s.signaled = true;
    s.window = st;
    s.wr.sg_list = nullptr;
    s.wr.num_sge = 0;
    s.done = promise<>();
    return s;
}

future<> connection_impl::post_window_op(send_slot& s) noexcept {
    auto f = s.done.get_future();
    append(s);
    return f;
}

future<> connection_impl::invalidate_window(memory_window& w) {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    if (!w || w._s->shard != _shard) {
        return make_exception_future<>(
            std::invalid_argument("invalidate_window: no window, or one of another shard"));
    }
    if (!usable()) {
        return make_exception_future<>(_error ? _error : closed_error());
    }
    return start_op<void>(false, [this, st = w._s] { return issue_invalidate_window(st); });
}

future<> connection_impl::issue_invalidate_window(const std::shared_ptr<window_state>& st) {
    send_slot& s = prepare_window_op(send_slot::op::invalidate_window, st);
    s.wr.opcode = IBV_WR_LOCAL_INV;
    s.wr.invalidate_rkey = st->bound.rkey;
    return post_window_op(s);
}

} // namespace shoal::net::rdma::internal

// --- rdma::connection's one-sided operations (and an immediate channel's WRITE_WITH_IMM)

namespace shoal::net::rdma {

using internal::one_sided_op;

future<> connection::read(local_span dst, const remote_region& src, uint64_t offset) {
    return impl().start<void>(one_sided_op::read(std::move(dst), src, offset));
}

future<> connection::write(local_span src, const remote_region& dst, uint64_t offset) {
    return impl().start<void>(one_sided_op::write(std::move(src), dst, offset));
}

future<> connection::write_with_imm(local_span src, const remote_region& dst, uint64_t offset, uint32_t imm) {
    return impl().start<void>(one_sided_op::write_with_imm(std::move(src), dst, offset, imm));
}

void connection::read(local_span dst, const remote_region& src, uint64_t offset,
                      op_completion& done) noexcept {
    impl().start(one_sided_op::read(std::move(dst), src, offset), done);
}

void connection::write(local_span src, const remote_region& dst, uint64_t offset,
                       op_completion& done) noexcept {
    impl().start(one_sided_op::write(std::move(src), dst, offset), done);
}

future<uint64_t> connection::fetch_add(const remote_region& dst, uint64_t offset, uint64_t add) {
    return impl().start<uint64_t>(one_sided_op::fetch_add(dst, offset, add));
}

future<uint64_t> connection::compare_swap(const remote_region& dst, uint64_t offset, uint64_t expected,
                                          uint64_t desired) {
    return impl().start<uint64_t>(one_sided_op::compare_swap(dst, offset, expected, desired));
}

future<> connection::read(local_span dst, const remote_region& src, uint64_t offset, abort_source& as) {
    return impl().start<void>(one_sided_op::read(std::move(dst), src, offset), as);
}

future<> connection::write(local_span src, const remote_region& dst, uint64_t offset, abort_source& as) {
    return impl().start<void>(one_sided_op::write(std::move(src), dst, offset), as);
}

future<> connection::write_with_imm(local_span src, const remote_region& dst, uint64_t offset, uint32_t imm,
                                    abort_source& as) {
    return impl().start<void>(one_sided_op::write_with_imm(std::move(src), dst, offset, imm), as);
}

future<uint64_t> connection::fetch_add(const remote_region& dst, uint64_t offset, uint64_t add,
                                       abort_source& as) {
    return impl().start<uint64_t>(one_sided_op::fetch_add(dst, offset, add), as);
}

future<uint64_t> connection::compare_swap(const remote_region& dst, uint64_t offset, uint64_t expected,
                                          uint64_t desired, abort_source& as) {
    return impl().start<uint64_t>(one_sided_op::compare_swap(dst, offset, expected, desired), as);
}

future<> immediate_channel::write_with_imm(local_span src, const remote_region& dst, uint64_t offset,
                                           uint32_t value) {
    if (value > max_value) {
        return make_exception_future<>(std::invalid_argument("immediate_channel::write_with_imm: value " +
                                                             std::to_string(value) + " exceeds 2^28 - 1"));
    }
    return _ref->impl().start<void>(one_sided_op::write_with_imm(
        std::move(src), dst, offset, (uint32_t(_tag) << internal::immediate_value_bits) | value));
}

} // namespace shoal::net::rdma
