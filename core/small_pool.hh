#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

namespace shoal::internal {

/// Per-thread free lists for the small objects a shard makes and frees by the million: pending
/// continuations, cross-shard messages, I/O completions. A freed object goes on its size class's
/// list (up to `max_cached` per class) and the next allocation of that class pops it, instead
/// of a trip through malloc. Objects are freed on the thread that allocated them (a shard's
/// tasks never migrate); one freed elsewhere only moves to that thread's list. What the lists
/// hold is returned to malloc when the thread exits. Built with AddressSanitizer the lists are
/// bypassed, so use-after-free stays visible.
class small_pool {
public:
    static constexpr size_t granule = 16;
    /// Larger objects go straight to operator new.
    static constexpr size_t max_size = 256;
    static constexpr unsigned classes = max_size / granule;
    /// Objects kept per class; beyond that they go back to operator delete.
    static constexpr unsigned max_cached = 1024;

    /// Memory for an object of `size` bytes (alignment up to 16); throws std::bad_alloc.
    static void* allocate(size_t size);
    /// Same, returning null instead of throwing.
    static void* allocate(size_t size, const std::nothrow_t&) noexcept;
    /// Returns what `allocate(size)` gave (same `size`).
    static void deallocate(void* p, size_t size) noexcept;

    /// Allocations of the calling thread served from a free list (no malloc) since it started.
    static uint64_t reused() noexcept;
    /// Returns every object cached by the calling thread to operator delete (done at thread exit).
    static void release_cached() noexcept;

private:
    struct node {
        node* next;
    };
    struct lists {
        node* head[classes];
        uint32_t count[classes];
        uint64_t reused;
        bool cleanup_registered;
    };
    static constexpr unsigned class_of(size_t size) noexcept { return unsigned((size - 1) / granule); }
    static void register_cleanup() noexcept;
    static constinit thread_local lists tl_lists;

public:
    /// False in AddressSanitizer builds: every allocation then goes to operator new.
#if defined(__SANITIZE_ADDRESS__)
    static constexpr bool enabled = false;
#else
    static constexpr bool enabled = true;
#endif
};

inline void* small_pool::allocate(size_t size, const std::nothrow_t&) noexcept {
    if (enabled && size <= max_size) {
        unsigned c = class_of(size);
        lists& l = tl_lists;
        if (node* n = l.head[c]) {
            l.head[c] = n->next;
            --l.count[c];
            ++l.reused;
            return n;
        }
        // A miss allocates the class's full size, so any object of the class can reuse it.
        return ::operator new((c + 1) * granule, std::nothrow);
    }
    return ::operator new(size, std::nothrow);
}

inline void* small_pool::allocate(size_t size) {
    if (void* p = allocate(size, std::nothrow)) {
        return p;
    }
    throw std::bad_alloc();
}

inline void small_pool::deallocate(void* p, size_t size) noexcept {
    if (enabled && size <= max_size) {
        unsigned c = class_of(size);
        lists& l = tl_lists;
        if (l.count[c] < max_cached) {
            if (!l.cleanup_registered) [[unlikely]] {
                register_cleanup();
            }
            auto* n = static_cast<node*>(p);
            n->next = l.head[c];
            l.head[c] = n;
            ++l.count[c];
            return;
        }
    }
    ::operator delete(p);
}

inline uint64_t small_pool::reused() noexcept {
    return tl_lists.reused;
}

} // namespace shoal::internal

/// Declares class-specific operator new/delete that allocate from `small_pool` (used inside a
/// class definition). Over-aligned classes bypass the pool.
#define SHOAL_SMALL_POOL_ALLOCATED                                                                           \
    static void* operator new(std::size_t size) {                                                            \
        return ::shoal::internal::small_pool::allocate(size);                                                \
    }                                                                                                        \
    static void* operator new(std::size_t size, const std::nothrow_t& nt) noexcept {                         \
        return ::shoal::internal::small_pool::allocate(size, nt);                                            \
    }                                                                                                        \
    static void operator delete(void* p, std::size_t size) noexcept {                                        \
        ::shoal::internal::small_pool::deallocate(p, size);                                                  \
    }                                                                                                        \
    static void* operator new(std::size_t size, std::align_val_t al) {                                       \
        return ::operator new(size, al);                                                                     \
    }                                                                                                        \
    static void* operator new(std::size_t size, std::align_val_t al, const std::nothrow_t& nt) noexcept {    \
        return ::operator new(size, al, nt);                                                                 \
    }                                                                                                        \
    static void operator delete(void* p, std::size_t size, std::align_val_t al) noexcept {                   \
        ::operator delete(p, size, al);                                                                      \
    }
