#pragma once

#include "net/rdma/memory_region.hh"
#include "net/temporary_buffer.hh"

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

struct ibv_mr; // <infiniband/verbs.h>: only the .cc files that call verbs include it
struct ibv_pd;

namespace shoal::net::rdma {

class memory_pool;

/// Sizing and limits of a shard's registered memory pool.
struct pool_options {
    /// Bytes per registered region (rounded up to a multiple of `max_buffer` and of 2 MiB).
    size_t region_size = size_t(16) << 20;
    /// Bytes registered when the pool is created (at least one region).
    size_t initial_bytes = size_t(16) << 20;
    /// Registration limit: the pool never registers more than this.
    size_t max_bytes = size_t(256) << 20;
    /// Smallest and largest buffer (size classes are the powers of two in between).
    size_t min_buffer = 256;
    size_t max_buffer = size_t(1) << 20;
    /// Fraction of `max_bytes` in use above which optional allocations (receive windows of new
    /// connections) are refused, so established traffic keeps its memory.
    double high_watermark = 0.85;
    /// Try hugepages (MAP_HUGETLB) first; fall back to normal pages with MADV_HUGEPAGE.
    bool hugepages = true;
};

/// Counters of one pool; read them on the pool's shard.
struct pool_stats {
    uint64_t registered_bytes = 0;   ///< bytes in registered regions
    uint64_t regions = 0;            ///< registered regions
    uint64_t hugepage_regions = 0;   ///< of which backed by hugepages
    uint64_t registrations = 0;      ///< ibv_reg_mr calls this pool made
    uint64_t in_use_bytes = 0;       ///< capacity of the buffers handed out
    uint64_t in_use_buffers = 0;     ///< buffers handed out
    uint64_t peak_in_use_bytes = 0;  ///< highest in_use_bytes seen
    uint64_t allocations = 0;        ///< buffers handed out in total
    uint64_t failures = 0;           ///< allocations refused (limit or watermark)
    uint64_t watermark_refusals = 0; ///< of which optional ones refused above the high watermark
    uint64_t remote_frees = 0;       ///< buffers that came home from another shard
};

namespace internal {
/// The bookkeeping of one pool buffer; it is also the `buffer_owner` of the `buffer`, the
/// temporary_buffers and the holds (`memory_hold`) made from it, so handing received memory to
/// a reader allocates nothing. The memory returns to the pool when the last reference goes.
class buffer_desc final : public net::buffer_owner {
public:
    char* data = nullptr;
    memory_pool* pool = nullptr;
    buffer_desc* next_free = nullptr;
    uint32_t lkey = 0;
    uint16_t size_class = 0;
    uint8_t size_shift = 0; // the size class's bytes are 1 << size_shift (the buffer's capacity)
    bool needs_ref = false; // the owner's count dropped to zero before; ref() before reuse
    /// Made on the pool's shard: its count is only touched there (see `buffer_owner`).
    buffer_desc() noexcept { stay_home(); }
    ~buffer_desc() override = default;

private:
    void release() noexcept override;
    /// Dropped on another shard: the drop is sent to the pool's shard.
    void unref_elsewhere() noexcept override;
};
} // namespace internal

/// A buffer of registered memory from a shard's pool (RAII, move-only). Destroying it, or the
/// last temporary_buffer, span or export made from it, returns it to its pool, on its own shard
/// (a buffer freed on another shard travels home).
class buffer {
public:
    buffer() noexcept = default;
    buffer(buffer&& o) noexcept
        : _d(std::exchange(o._d, nullptr)) {}
    buffer& operator=(buffer&& o) noexcept {
        if (this != &o) {
            reset();
            _d = std::exchange(o._d, nullptr);
        }
        return *this;
    }
    buffer(const buffer&) = delete;
    buffer& operator=(const buffer&) = delete;
    ~buffer() {
        if (_d) { // an empty buffer (moved from, never allocated) costs no call
            reset();
        }
    }

    /// Start of the buffer's memory.
    char* data() const noexcept { return _d->data; }
    /// Usable bytes (the size class, at least what was asked for).
    size_t capacity() const noexcept { return size_t(1) << _d->size_shift; }
    /// The local key of the registered region holding the buffer.
    uint32_t lkey() const noexcept { return _d->lkey; }
    /// True when it holds a buffer.
    explicit operator bool() const noexcept { return _d != nullptr; }
    /// A new reference on the buffer's memory (see `memory_hold`); empty for an empty buffer.
    memory_hold hold() const noexcept { return memory_hold(_d); }

    /// Gives the buffer up as a temporary_buffer of its first `length` bytes, without copying;
    /// the memory returns to the pool when the last reference (slices included) is dropped.
    net::temporary_buffer into_temporary_buffer(size_t length) && noexcept;
    /// Returns the buffer to its pool now (or drops this reference, when spans or temporary
    /// buffers made from it still hold it).
    void reset() noexcept {
        if (_d) {
            std::exchange(_d, nullptr)->unref(); // the last reference frees it (release)
        }
    }

private:
    friend class memory_pool;
    explicit buffer(internal::buffer_desc* d) noexcept
        : _d(d) {}
    internal::buffer_desc* _d = nullptr;
};

namespace internal {
/// Throws the std::out_of_range of a `span_of` outside its buffer.
[[noreturn]] void throw_bad_span(const buffer& b, size_t offset, size_t len);
} // namespace internal

inline local_span span_of(const buffer& b, size_t offset, size_t len) {
    if (!b || offset > b.capacity() || len > b.capacity() - offset) [[unlikely]] {
        internal::throw_bad_span(b, offset, len);
    }
    return {b.data() + offset, uint32_t(len), b.lkey(), b.hold()};
}

/// A shard's registered memory: a few large regions registered once (hugepages when the system
/// has them), carved into power-of-two size classes handed out as `buffer`s. Nothing is
/// registered on the data path: a new region is registered only when the pool grows, up to
/// `max_bytes`. Owned and used by one shard.
class memory_pool {
public:
    /// Registers `opts.initial_bytes` on `pd`. Throws rdma_error when registration fails (with
    /// the memlock limit in the message).
    memory_pool(ibv_pd* pd, const pool_options& opts, unsigned shard);
    ~memory_pool();
    memory_pool(const memory_pool&) = delete;
    memory_pool& operator=(const memory_pool&) = delete;

    /// A buffer of at least `size` bytes; throws pool_exhausted when the limit is reached or
    /// `size` exceeds `max_buffer_size()`.
    buffer allocate(size_t size);
    /// Like `allocate` but returns an empty buffer instead of throwing. An `optional`
    /// allocation is also refused above the high watermark.
    buffer try_allocate(size_t size, bool optional = false) noexcept;

    /// The largest buffer the pool hands out.
    size_t max_buffer_size() const noexcept { return _opts.max_buffer; }
    /// The capacity a request of `size` bytes gets.
    size_t capacity_for(size_t size) const noexcept;
    /// Whether in-use memory is above the high watermark.
    bool above_high_watermark() const noexcept;
    /// The local key when [p, p + len) lies inside one of the pool's regions.
    std::optional<uint32_t> lkey_of(const void* p, size_t len) const noexcept;
    /// The pool's counters.
    const pool_stats& stats() const noexcept { return _stats; }
    /// Number of size classes (the powers of two from `min_buffer` to `max_buffer`).
    size_t class_count() const noexcept { return _classes.size(); }
    /// The buffer size of class `i` (< class_count()).
    size_t class_size(size_t i) const noexcept { return _classes[i].size; }
    /// Buffers of class `i` handed out now.
    uint64_t class_in_use_buffers(size_t i) const noexcept { return _classes[i].in_use; }
    /// The options in effect (sizes rounded as described in `pool_options`).
    const pool_options& options() const noexcept { return _opts; }
    /// The shard that owns the pool.
    unsigned shard() const noexcept { return _shard; }

private:
    friend class internal::buffer_desc;
    friend class buffer;
    struct region {
        char* base = nullptr;
        size_t size = 0;
        size_t next_slab = 0; // offset of the first slab not yet carved
        ibv_mr* mr = nullptr;
        bool huge = false;
    };
    struct size_class {
        size_t size = 0;
        uint64_t in_use = 0; // buffers of this class handed out
        internal::buffer_desc* free = nullptr;
        std::vector<std::unique_ptr<internal::buffer_desc[]>> descs;
    };
    /// The size class of a buffer of `size` bytes (≤ `max_buffer`): inline, on every allocation.
    unsigned class_of(size_t size) const noexcept {
        const size_t s = std::bit_ceil(size > _opts.min_buffer ? size : _opts.min_buffer);
        return unsigned(std::countr_zero(s) - std::countr_zero(_opts.min_buffer));
    }
    /// `try_allocate`'s body, inlined into it and into `allocate` (one call less per allocation).
    buffer take(size_t size, bool optional) noexcept;
    bool add_region() noexcept;
    bool carve_slab(size_class& c, unsigned index) noexcept;
    void largest_class_unlink(internal::buffer_desc* d) noexcept;
    void free_local(internal::buffer_desc* d) noexcept;
    void free(internal::buffer_desc* d) noexcept;

    ibv_pd* _pd;
    pool_options _opts;
    unsigned _shard;
    std::vector<region> _regions;
    std::vector<size_class> _classes;
    pool_stats _stats;
    std::string _last_error;
};

/// ibv_reg_mr calls made by shoal's RDMA layer in this process, all shards (pools, user
/// registrations, exported regions).
uint64_t registration_count() noexcept;

namespace internal {
/// Counts one registration (see registration_count).
void count_registration() noexcept;
} // namespace internal

} // namespace shoal::net::rdma
