#pragma once

// Fault injection for tests: named points in net/rdma where a shard can be told to fail, so
// the error paths (QP in the error state, a failed post, an exhausted pool, a peer that
// ignores credits) run in tests. Off, each point costs one predictable branch on a
// shard-local flag.

#include <array>
#include <cstdint>

namespace shoal::net::rdma {

/// The points where a fault can be injected.
enum class fault : uint8_t {
    qp_error,        ///< before a connection posts its sends: its QP is moved to the error state
    post_send_fails, ///< ibv_post_send fails (EIO), nothing of the batch is posted
    pool_allocation, ///< a pool allocation fails as if the pool were exhausted
    ignore_credits,  ///< the stream sends data without a credit (a hostile peer)
};
inline constexpr unsigned fault_count = 4;

/// The calling shard's fault points. Arm a point to fire on its `skip + 1`-th hit and the
/// `times - 1` hits after it; `fired` counts the faults injected.
class fault_injector {
public:
    /// Fires `f` at its hits number skip+1 … skip+times (counted from now).
    void arm(fault f, unsigned skip = 0, unsigned times = 1) noexcept;
    /// Turns every point off.
    void disarm() noexcept;
    /// Faults of kind `f` injected so far.
    uint64_t fired(fault f) const noexcept { return _points[unsigned(f)].fired; }
    /// Whether any point is armed (the only test on a hot path).
    bool armed() const noexcept { return _armed; }
    /// Called at point `f` when `armed()`: whether to fail now.
    bool hit(fault f) noexcept;

private:
    struct point {
        unsigned skip = 0;
        unsigned remaining = 0;
        uint64_t fired = 0;
    };
    std::array<point, fault_count> _points{};
    bool _armed = false;
};

namespace internal {
/// The fault points of each thread (constant-initialized: no guard or wrapper on access).
extern constinit thread_local fault_injector tl_fault_injector;
} // namespace internal

/// The calling shard's fault injector.
inline fault_injector& faults() noexcept {
    return internal::tl_fault_injector;
}

namespace internal {
/// At a fault point: true when `f` is to fail now (one branch when nothing is armed).
inline bool inject(fault f) noexcept {
    fault_injector& fi = faults();
    return fi.armed() && fi.hit(f);
}
} // namespace internal

} // namespace shoal::net::rdma
