// Memory windows of type 2: allocation from a per-shard free list and release (the bind and
// local invalidate work requests a connection posts for them are in one_sided.cc).
#include "net/rdma/memory_window.hh"

#include "net/rdma/context.hh"
#include "net/rdma/error.hh"

#include <fmt/format.h>

namespace shoal::net::rdma {

namespace internal {

window_state::~window_state() {
    if (!mw) {
        return;
    }
    shard_context* ctx = shard_context::local_or_null();
    if (reusable && ctx && ctx->shard() == shard) {
        try {
            ctx->keep_window(mw);
            return;
        } catch (...) {
        }
    }
    destroy();
}

void window_state::destroy() noexcept {
    if (mw) {
        ibv_dealloc_mw(std::exchange(mw, nullptr));
        bound = {};
    }
}

} // namespace internal

void memory_window::revoke_now() noexcept {
    if (_s) {
        _s->destroy();
    }
}

memory_window allocate_window() {
    shard_context& ctx = shard_context::local();
    if (!ctx.memory_windows()) {
        throw rdma_error(fmt::format("device {} has no memory windows of type 2", ctx.dev().name()));
    }
    ibv_mw* mw = ctx.take_window();
    if (!mw) {
        mw = ibv_alloc_mw(ctx.pd(), IBV_MW_TYPE_2);
        if (!mw) {
            internal::throw_errno("ibv_alloc_mw(type 2)", errno);
        }
    }
    memory_window w;
    w._s = std::make_shared<internal::window_state>();
    w._s->mw = mw;
    w._s->shard = ctx.shard();
    return w;
}

} // namespace shoal::net::rdma
