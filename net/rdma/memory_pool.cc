#include "net/rdma/memory_pool.hh"

#include "core/log.hh"
#include "core/smp.hh"
#include "net/rdma/error.hh"
#include "net/rdma/fault_injector.hh"
#include "net/rdma/shard_check.hh"

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <sys/resource.h>

namespace shoal::net::rdma {

namespace {
logger pool_log("rdma-pool");
std::atomic<uint64_t> g_registrations{0};
constexpr size_t huge_page = size_t(2) << 20;

size_t round_pow2(size_t v) noexcept {
    return std::bit_ceil(std::max<size_t>(v, 1));
}

std::string memlock_text() {
    rlimit rl{};
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
        return "unknown";
    }
    if (rl.rlim_cur == RLIM_INFINITY) {
        return "unlimited";
    }
    return fmt::format("{} KiB", rl.rlim_cur >> 10);
}
} // namespace

uint64_t registration_count() noexcept {
    return g_registrations.load(std::memory_order_relaxed);
}

void internal::count_registration() noexcept {
    g_registrations.fetch_add(1, std::memory_order_relaxed);
}

// --- buffer

void internal::buffer_desc::release() noexcept {
    needs_ref = true;
    pool->free(this);
}

void internal::buffer_desc::unref_elsewhere() noexcept {
    // The count is not atomic: the drop runs on the pool's shard, like every other use of it.
    (void)submit_to(pool->_shard, [d = this] {
        ++d->pool->_stats.remote_frees;
        d->unref();
    });
}

net::temporary_buffer buffer::into_temporary_buffer(size_t length) && noexcept {
    internal::buffer_desc* d = std::exchange(_d, nullptr);
    assert(d && length <= (size_t(1) << d->size_shift)); // the buffer's capacity
    return net::temporary_buffer(d->data, length, d);    // the buffer's reference moves over
}

// --- memory_pool

memory_pool::memory_pool(ibv_pd* pd, const pool_options& opts, unsigned shard)
    : _pd(pd)
    , _opts(opts)
    , _shard(shard) {
    _opts.min_buffer = round_pow2(std::max<size_t>(_opts.min_buffer, 64));
    _opts.max_buffer = round_pow2(std::max(_opts.max_buffer, _opts.min_buffer));
    size_t unit = std::max(_opts.max_buffer, huge_page);
    _opts.region_size = std::max(unit, (_opts.region_size + unit - 1) / unit * unit);
    _opts.max_bytes = std::max(_opts.max_bytes, _opts.region_size);
    for (size_t s = _opts.min_buffer; s <= _opts.max_buffer; s <<= 1) {
        size_class c;
        c.size = s;
        _classes.push_back(std::move(c));
    }
    size_t initial = std::max(_opts.initial_bytes, _opts.region_size);
    while (_stats.registered_bytes < initial && _stats.registered_bytes < _opts.max_bytes) {
        if (!add_region()) {
            for (auto& r : _regions) {
                ibv_dereg_mr(r.mr);
                munmap(r.base, r.size);
            }
            throw rdma_error("cannot create the registered memory pool: " + _last_error);
        }
    }
}

memory_pool::~memory_pool() {
    if (_stats.in_use_buffers) {
        pool_log.error("memory pool of shard {} destroyed with {} buffers ({} bytes) still in use", _shard,
                       _stats.in_use_buffers, _stats.in_use_bytes);
    }
    for (auto& r : _regions) {
        if (int rc = ibv_dereg_mr(r.mr); rc != 0) {
            pool_log.error("ibv_dereg_mr: {}", std::strerror(rc));
        }
        munmap(r.base, r.size);
    }
}

size_t memory_pool::capacity_for(size_t size) const noexcept {
    return size > _opts.max_buffer ? 0 : _classes[class_of(size)].size;
}

bool memory_pool::above_high_watermark() const noexcept {
    return double(_stats.in_use_bytes) > _opts.high_watermark * double(_opts.max_bytes);
}

bool memory_pool::add_region() noexcept {
    size_t size = _opts.region_size;
    if (_stats.registered_bytes + size > _opts.max_bytes) {
        _last_error = fmt::format("registration limit of {} bytes reached", _opts.max_bytes);
        return false;
    }
    void* p = MAP_FAILED;
    bool huge = false;
    if (_opts.hugepages) {
        p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
        huge = p != MAP_FAILED;
    }
    if (p == MAP_FAILED) {
        p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            _last_error = internal::errno_text(fmt::format("mmap of {} bytes", size), errno);
            return false;
        }
        if (_opts.hugepages) {
            (void)madvise(p, size, MADV_HUGEPAGE);
        }
    }
    internal::count_registration();
    ++_stats.registrations;
    ibv_mr* mr = ibv_reg_mr(_pd, p, size, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) {
        int e = errno;
        munmap(p, size);
        _last_error = internal::errno_text(
            fmt::format("ibv_reg_mr of {} bytes (memlock limit {})", size, memlock_text()), e);
        return false;
    }
    _regions.push_back(region{static_cast<char*>(p), size, 0, mr, huge});
    _stats.registered_bytes += size;
    ++_stats.regions;
    _stats.hugepage_regions += huge ? 1 : 0;
    pool_log.debug("shard {}: registered region {} of {} MiB ({})", _shard, _regions.size(), size >> 20,
                   huge ? "hugepages" : "normal pages");
    return true;
}

bool memory_pool::carve_slab(size_class& c, unsigned index) noexcept {
    const size_t slab = _opts.max_buffer;
    region* r = nullptr;
    for (auto& candidate : _regions) {
        if (candidate.next_slab + slab <= candidate.size) {
            r = &candidate;
            break;
        }
    }
    char* base = nullptr;
    uint32_t lkey = 0;
    internal::buffer_desc* reused = nullptr;
    if (!r && !add_region()) {
        // No region space and no room to register more: a free buffer of the largest class is
        // exactly one slab; re-carve it for this class.
        size_class& largest = _classes.back();
        if (&largest == &c || !largest.free) {
            return false;
        }
        reused = largest.free;
        base = reused->data;
        lkey = reused->lkey;
    } else {
        if (!r) {
            r = &_regions.back();
        }
        base = r->base + r->next_slab;
        lkey = r->mr->lkey;
    }
    size_t n = slab / c.size;
    std::unique_ptr<internal::buffer_desc[]> descs(new (std::nothrow) internal::buffer_desc[n]);
    if (!descs) {
        _last_error = "out of memory for buffer descriptors";
        return false;
    }
    if (reused) {
        largest_class_unlink(reused);
    } else {
        r->next_slab += slab;
    }
    for (size_t i = n; i-- > 0;) {
        auto& d = descs[i];
        d.data = base + i * c.size;
        d.pool = this;
        d.lkey = lkey;
        d.size_class = uint16_t(index);
        d.size_shift = uint8_t(std::countr_zero(c.size));
        d.next_free = c.free;
        c.free = &d;
    }
    c.descs.push_back(std::move(descs));
    return true;
}

void memory_pool::largest_class_unlink(internal::buffer_desc* d) noexcept {
    // `d` heads the largest class's free list (see carve_slab); its descriptor is retired.
    size_class& largest = _classes.back();
    largest.free = d->next_free;
    d->next_free = nullptr;
    d->data = nullptr;
}

buffer memory_pool::try_allocate(size_t size, bool optional) noexcept {
    return take(size, optional);
}

[[gnu::always_inline]] inline buffer memory_pool::take(size_t size, bool optional) noexcept {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA memory pool");
    if (internal::inject(fault::pool_allocation)) [[unlikely]] {
        ++_stats.failures;
        _last_error = "injected fault (pool_allocation)";
        return buffer();
    }
    if (size > _opts.max_buffer) {
        ++_stats.failures;
        _last_error =
            fmt::format("{} bytes exceed the largest pool buffer ({} bytes)", size, _opts.max_buffer);
        return buffer();
    }
    unsigned index = class_of(size);
    size_class& c = _classes[index];
    if (optional && double(_stats.in_use_bytes + c.size) > _opts.high_watermark * double(_opts.max_bytes)) {
        ++_stats.failures;
        ++_stats.watermark_refusals;
        _last_error =
            fmt::format("above the high watermark ({:.0f}% of {} bytes in use)",
                        100.0 * double(_stats.in_use_bytes) / double(_opts.max_bytes), _opts.max_bytes);
        return buffer();
    }
    if (!c.free && !carve_slab(c, index)) {
        ++_stats.failures;
        return buffer();
    }
    internal::buffer_desc* d = c.free;
    c.free = d->next_free;
    d->next_free = nullptr;
    if (d->needs_ref) { // its count reached zero when it was freed: the new buffer's reference
        d->ref();
        d->needs_ref = false;
    }
    ++_stats.allocations;
    ++_stats.in_use_buffers;
    ++c.in_use;
    _stats.in_use_bytes += c.size;
    _stats.peak_in_use_bytes = std::max(_stats.peak_in_use_bytes, _stats.in_use_bytes);
    return buffer(d);
}

buffer memory_pool::allocate(size_t size) {
    buffer b = take(size, false);
    if (!b) {
        throw pool_exhausted(fmt::format("RDMA memory pool of shard {}: cannot allocate {} bytes: {}", _shard,
                                         size, _last_error));
    }
    return b;
}

std::optional<uint32_t> memory_pool::lkey_of(const void* p, size_t len) const noexcept {
    auto* c = static_cast<const char*>(p);
    for (const auto& r : _regions) {
        if (c >= r.base && c + len <= r.base + r.size) {
            return r.mr->lkey;
        }
    }
    return std::nullopt;
}

void memory_pool::free_local(internal::buffer_desc* d) noexcept {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA memory pool");
    size_class& c = _classes[d->size_class];
    d->next_free = c.free;
    c.free = d;
    --_stats.in_use_buffers;
    --c.in_use;
    _stats.in_use_bytes -= c.size;
}

void memory_pool::free(internal::buffer_desc* d) noexcept {
    free_local(d); // the last drop runs on the pool's shard (buffer_desc::unref_elsewhere)
}

} // namespace shoal::net::rdma
