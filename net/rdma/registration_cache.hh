#pragma once

// A cache of memory registrations, found by address range, so that memory sent or received
// again is not registered again (each ibv_reg_mr pins pages and costs more than a large copy on
// some devices). It holds two kinds of entries:
//   - blocks it allocated itself (`allocate`): registered once; when the last buffer referring to
//     one is dropped, the block stays registered and idle, and the next `allocate` of its size
//     class takes it again;
//   - other memory (`hold`): registered on first use; the cache keeps a reference to the buffer,
//     so that memory cannot be freed, nor its address reused by another allocation, while it
//     is registered.
// Idle entries (no buffer of a block, no lease) are kept up to a byte bound and evicted least
// recently used first. An entry leaves the address index and is deregistered before its memory
// can be freed, so a registration is never found for memory that was freed ("invalidated on
// free"): no stale key is ever handed out. One cache belongs to one shard; its blocks may be
// dropped on other shards (the drop is sent home).

#include "net/rdma/memory_region.hh"
#include "net/temporary_buffer.hh"

#include <cstddef>
#include <cstdint>
#include <utility>

namespace shoal::net::rdma {

namespace internal {
struct cache_core;
struct cache_entry;
} // namespace internal

/// What a registration cache has done (see `registration_cache::stats`).
struct registration_cache_stats {
    uint64_t hits = 0;          ///< allocations and look-ups served by a registration it had
    uint64_t registrations = 0; ///< ibv_reg_mr calls it made (blocks and held memory)
    uint64_t evictions = 0;     ///< idle entries deregistered to stay under the bound
    size_t idle_bytes = 0;      ///< bytes of idle entries now (at most the bound)
    size_t entries = 0;         ///< registrations alive now (idle or in use)
};

/// Registered memory found by address range, LRU-bounded (see the file comment). Not movable:
/// keep it where its users can reach it (e.g. in a unique_ptr).
class registration_cache {
public:
    /// A use of one entry: the entry is not evicted nor deregistered while a lease exists (a peer
    /// may be accessing it). Move-only; use and drop it on the cache's shard.
    class lease {
    public:
        lease() noexcept = default;
        lease(lease&& o) noexcept
            : _e(std::exchange(o._e, nullptr)) {}
        lease& operator=(lease o) noexcept {
            std::swap(_e, o._e);
            return *this;
        }
        lease(const lease&) = delete;
        ~lease() { reset(); }
        /// True when it refers to an entry.
        explicit operator bool() const noexcept { return _e != nullptr; }
        /// [addr, addr + len) as a peer addresses it (must lie in the entry).
        remote_region remote(const void* addr, size_t len) const noexcept;
        /// [addr, addr + len) as the local side of an operation (must lie in the entry).
        local_span local(const void* addr, size_t len) const noexcept;
        /// Ends the use now.
        void reset() noexcept;

    private:
        friend class registration_cache;
        explicit lease(internal::cache_entry* e) noexcept;
        internal::cache_entry* _e = nullptr;
    };

    /// A cache keeping at most `max_idle_bytes` of idle registered memory, whose registrations
    /// grant peers `a` (local write is always granted).
    explicit registration_cache(size_t max_idle_bytes, access a = access::none);
    registration_cache(const registration_cache&) = delete;
    registration_cache& operator=(const registration_cache&) = delete;
    /// Deregisters and frees the idle entries; entries in use go when their last user does.
    ~registration_cache();

    /// `size` bytes of registered memory in a block of the cache (size classes are powers of
    /// two from 64 KiB): an idle block of that class when there is one, else a new registered
    /// block. Dropping the buffer's last slice makes the block idle again. Throws rdma_error or
    /// std::bad_alloc.
    net::temporary_buffer allocate(size_t size);

    /// The registration covering [addr, addr + len), if the cache has one (a block it allocated,
    /// or memory it holds); empty otherwise. Counts a hit when found.
    lease find(const void* addr, size_t len) noexcept;

    /// A registration covering `buf`: the one found, else `buf`'s bytes registered now and
    /// kept, with a reference to `buf`'s memory, while cached. Empty when `buf` is larger than
    /// the bound (such memory would be evicted at once: register it per use instead).
    lease hold(const net::temporary_buffer& buf);

    /// The bound given at construction.
    size_t max_idle_bytes() const noexcept;
    /// Counters and current sizes.
    registration_cache_stats stats() const noexcept;

private:
    internal::cache_core* _core;
};

} // namespace shoal::net::rdma
