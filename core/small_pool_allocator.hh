#pragma once

// An allocator for standard containers that takes its memory from the thread's `small_pool`:
// a small vector made and dropped per message (an RPC frame's attachment list) then costs no
// trip through malloc. Blocks larger than `small_pool::max_size` go to operator new as usual.

#include "core/small_pool.hh"

#include <cstddef>

namespace shoal::internal {

/// A stateless allocator over `small_pool` (alignment up to 16 bytes).
template <typename T>
class small_pool_allocator {
public:
    using value_type = T;
    static_assert(alignof(T) <= small_pool::granule, "small_pool aligns to 16 bytes");

    small_pool_allocator() noexcept = default;
    template <typename U>
    small_pool_allocator(const small_pool_allocator<U>&) noexcept {}

    /// Memory for `n` objects; throws std::bad_alloc.
    T* allocate(size_t n) { return static_cast<T*>(small_pool::allocate(n * sizeof(T))); }
    /// Returns what `allocate(n)` gave.
    void deallocate(T* p, size_t n) noexcept { small_pool::deallocate(p, n * sizeof(T)); }

    template <typename U>
    bool operator==(const small_pool_allocator<U>&) const noexcept {
        return true;
    }
};

} // namespace shoal::internal
