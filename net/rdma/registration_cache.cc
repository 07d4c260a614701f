// The registration cache: an address index and an LRU list of idle entries.
#include "net/rdma/registration_cache.hh"

#include "core/smp.hh"

#include <bit>
#include <cstdlib>
#include <list>
#include <map>
#include <new>

namespace shoal::net::rdma {

namespace internal {

/// One registration: a block the cache allocated (`owned`), or memory it holds (`pin`). A block
/// is the owner of the buffers `allocate` hands out.
struct cache_entry final : net::buffer_owner {
    cache_core* core = nullptr;
    char* data = nullptr;
    size_t size = 0;
    memory_region mr;
    bool owned = false;
    bool in_buffers = false; // a block some buffer refers to
    unsigned leases = 0;
    bool idle = false;         // in the LRU list (and counted in idle_bytes)
    net::temporary_buffer pin; // held memory (not owned)
    unsigned home = 0;
    std::list<cache_entry*>::iterator lru;
    std::multimap<size_t, cache_entry*>::iterator free_it;

    /// Drops on other shards are sent home (blocks only).
    void keep_home() noexcept { stay_home(); }
    void release() noexcept override;
    void unref_elsewhere() noexcept override {
        // The count is not atomic: the drop runs on the cache's shard, like every other use.
        (void)submit_to(home, [e = this] { e->unref(); });
    }
};

/// The cache's state; lives until the cache and its last entry are gone.
struct cache_core {
    size_t max_idle;
    access rights;
    bool open = true;
    std::map<uintptr_t, cache_entry*> index;         // live entries by start address
    std::list<cache_entry*> lru;                     // idle entries, most recently used first
    std::multimap<size_t, cache_entry*> free_blocks; // idle blocks by size
    registration_cache_stats stats;

    /// Whether `e` is in use (a buffer of the block, or a lease).
    static bool busy(const cache_entry* e) noexcept { return e->leases > 0 || e->in_buffers; }

    /// `e` went out of use: kept idle (most recently used), or destroyed when closed.
    void went_idle(cache_entry* e) noexcept {
        if (!open) {
            destroy(e);
            return;
        }
        lru.push_front(e);
        e->lru = lru.begin();
        e->idle = true;
        stats.idle_bytes += e->size;
        if (e->owned) {
            e->free_it = free_blocks.emplace(e->size, e);
        }
        trim();
    }

    /// `e` is used again: out of the idle list.
    void leave_idle(cache_entry* e) noexcept {
        if (!e->idle) {
            return;
        }
        lru.erase(e->lru);
        if (e->owned) {
            free_blocks.erase(e->free_it);
        }
        stats.idle_bytes -= e->size;
        e->idle = false;
    }

    /// Evicts idle entries, least recently used first, until under the bound.
    void trim() noexcept {
        while (stats.idle_bytes > max_idle && !lru.empty()) {
            cache_entry* e = lru.back();
            leave_idle(e);
            ++stats.evictions;
            destroy(e);
        }
    }

    /// Out of the index, deregistered, then its memory freed (or let go): in that order, so no
    /// registration of freed memory is ever found.
    void destroy(cache_entry* e) noexcept {
        auto it = index.find(reinterpret_cast<uintptr_t>(e->data));
        if (it != index.end() && it->second == e) {
            index.erase(it);
        }
        e->mr.deregister();
        if (e->owned) {
            std::free(e->data);
        }
        e->pin.reset();
        --stats.entries;
        delete e;
        if (!open && stats.entries == 0) {
            delete this;
        }
    }

    /// Registers `len` bytes at `data` as a new entry in the index.
    cache_entry* add(char* data, size_t len, bool owned) {
        auto* e = new cache_entry();
        e->core = this;
        e->data = data;
        e->size = len;
        e->owned = owned;
        e->home = this_shard_id();
        try {
            e->mr = register_memory(data, len, rights);
        } catch (...) {
            delete e;
            throw;
        }
        ++stats.registrations;
        ++stats.entries;
        index[reinterpret_cast<uintptr_t>(data)] = e;
        return e;
    }
};

void cache_entry::release() noexcept {
    in_buffers = false;
    if (leases == 0) {
        core->went_idle(this);
    }
}

} // namespace internal

using internal::cache_core;
using internal::cache_entry;

// --- lease

registration_cache::lease::lease(cache_entry* e) noexcept
    : _e(e) {
    e->core->leave_idle(e);
    ++e->leases;
}

void registration_cache::lease::reset() noexcept {
    if (cache_entry* e = std::exchange(_e, nullptr)) {
        if (--e->leases == 0 && !e->in_buffers) {
            e->core->went_idle(e);
        }
    }
}

remote_region registration_cache::lease::remote(const void* addr, size_t len) const noexcept {
    return {reinterpret_cast<uintptr_t>(addr), _e->mr.rkey(), len};
}

local_span registration_cache::lease::local(const void* addr, size_t len) const noexcept {
    local_span s{static_cast<char*>(const_cast<void*>(addr)), uint32_t(len), _e->mr.lkey(), {}};
    if (_e->in_buffers) {
        s.hold = memory_hold(_e); // the block stays out of the cache until the operation ends
    }
    return s;
}

// --- registration_cache

registration_cache::registration_cache(size_t max_idle_bytes, access a)
    : _core(new cache_core{max_idle_bytes, a}) {}

registration_cache::~registration_cache() {
    cache_core* core = _core;
    core->open = false;
    if (core->stats.entries == 0) {
        delete core;
        return;
    }
    while (!core->lru.empty()) {
        cache_entry* e = core->lru.back();
        const bool last = core->stats.entries == 1;
        core->leave_idle(e);
        core->destroy(e); // the last entry deletes the core
        if (last) {
            return;
        }
    }
    // Entries still in use destroy themselves (and the last one the core) when they go idle.
}

net::temporary_buffer registration_cache::allocate(size_t size) {
    const size_t cap = std::max<size_t>(size_t(64) << 10, std::bit_ceil(std::max<size_t>(size, 1)));
    auto it = _core->free_blocks.find(cap);
    if (it != _core->free_blocks.end()) {
        cache_entry* e = it->second;
        _core->leave_idle(e);
        ++_core->stats.hits;
        e->in_buffers = true;
        e->ref(); // its count was zero since its last buffer went
        return net::temporary_buffer(e->data, size, e);
    }
    void* mem = std::aligned_alloc(4096, cap);
    if (!mem) {
        throw std::bad_alloc();
    }
    cache_entry* e;
    try {
        e = _core->add(static_cast<char*>(mem), cap, true);
    } catch (...) {
        std::free(mem);
        throw;
    }
    e->keep_home();
    e->in_buffers = true;
    return net::temporary_buffer(e->data, size, e); // the block's first reference
}

registration_cache::lease registration_cache::find(const void* addr, size_t len) noexcept {
    if (len == 0) {
        return {};
    }
    const auto a = reinterpret_cast<uintptr_t>(addr);
    auto it = _core->index.upper_bound(a);
    if (it == _core->index.begin()) {
        return {};
    }
    --it;
    cache_entry* e = it->second;
    if (a + len > reinterpret_cast<uintptr_t>(e->data) + e->size) {
        return {};
    }
    ++_core->stats.hits;
    return lease(e);
}

registration_cache::lease registration_cache::hold(const net::temporary_buffer& buf) {
    if (lease l = find(buf.get(), buf.size())) {
        return l;
    }
    if (buf.empty() || buf.size() > _core->max_idle) {
        return {};
    }
    auto same = _core->index.find(reinterpret_cast<uintptr_t>(buf.get()));
    if (same != _core->index.end()) {
        // A smaller registration at the same address: replaced when idle, else left alone.
        cache_entry* old = same->second;
        if (cache_core::busy(old)) {
            return {};
        }
        _core->leave_idle(old);
        ++_core->stats.evictions;
        _core->destroy(old);
    }
    cache_entry* e = _core->add(const_cast<char*>(buf.get()), buf.size(), false);
    e->pin = buf.share();
    return lease(e);
}

size_t registration_cache::max_idle_bytes() const noexcept {
    return _core->max_idle;
}

registration_cache_stats registration_cache::stats() const noexcept {
    return _core->stats;
}

} // namespace shoal::net::rdma
