#pragma once

#include "net/rdma/memory_region.hh"

#include <cstdint>
#include <memory>

struct ibv_mw; // <infiniband/verbs.h>: only the .cc files that call verbs include it

namespace shoal::net::rdma {

namespace internal {
class connection_impl;

/// The verbs window behind a `memory_window`, shared with the send slot of a pending bind or
/// invalidate (so the window outlives the work request that names it).
struct window_state {
    ibv_mw* mw = nullptr;
    unsigned shard = 0;
    remote_region bound;  ///< what the last bind granted (rkey included); empty when unbound
    bool reusable = true; ///< not bound: may go back to the shard's free list
    window_state() noexcept = default;
    window_state(const window_state&) = delete;
    window_state& operator=(const window_state&) = delete;
    /// Returns the window to its shard's free list when `reusable`, deallocates it otherwise.
    ~window_state();
    /// Deallocates the window now (its rkey stops working at once).
    void destroy() noexcept;
};
} // namespace internal

/// A memory window of type 2 on the calling shard: bound with `connection::bind_window` to a
/// range of a registration (made with `access::mw_bind`) on ONE connection's QP, it gives that
/// peer, and no other, the access chosen at the bind to exactly that range, under a fresh rkey.
/// Caveat: rxe (Soft-RoCE) checks the range against the MR, not the window — there a window
/// confines the peer to one QP and its rights, not to its range (docs/rdma.md).
/// `connection::invalidate_window` (LOCAL_INV on the same QP) revokes it; `revoke_now()` revokes
/// it synchronously by deallocating it.
///
/// Reuse: a window goes back to the shard's free list only when it is not bound (never bound,
/// or a local invalidate of it completed). A window still bound when dropped — its connection
/// failed, or a bind or invalidate failed — is deallocated instead: a type-2 window bound to a
/// QP that is gone stays valid (rxe refuses to bind it again) and only deallocation frees it.
class memory_window {
public:
    /// No window.
    memory_window() noexcept = default;
    memory_window(memory_window&&) noexcept = default;
    memory_window& operator=(memory_window&&) noexcept = default;
    /// True when it holds a window.
    explicit operator bool() const noexcept { return _s && _s->mw; }
    /// Whether a bind was issued and not undone by a completed invalidate.
    bool bound() const noexcept { return _s && !_s->reusable; }
    /// The range and rkey of the last bind (valid once its future resolved).
    remote_region descriptor() const noexcept { return _s ? _s->bound : remote_region{}; }
    /// Deallocates the window now: its rkey fails on every peer from this call on (for a
    /// connection that ended, or any time a synchronous revocation is needed).
    void revoke_now() noexcept;

private:
    friend memory_window allocate_window();
    friend class internal::connection_impl;
    std::shared_ptr<internal::window_state> _s;
};

/// A type-2 window from the calling shard's free list (allocated when the list is empty).
/// Throws rdma_error when the device has no type-2 windows or the allocation fails.
memory_window allocate_window();

} // namespace shoal::net::rdma
