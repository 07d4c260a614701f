#pragma once

#include <cstdint>

namespace shoal::kv {

/// The counters one shard's store keeps, memcached's names. `SHOAL_KV_STORE_STATS(X)` lists
/// them once for the struct, summing and printing.
#define SHOAL_KV_STORE_STATS(X)                                                                              \
    X(cmd_get)                                                                                               \
    X(cmd_set)                                                                                               \
    X(cmd_flush)                                                                                             \
    X(cmd_touch)                                                                                             \
    X(cmd_meta)                                                                                              \
    X(get_hits)                                                                                              \
    X(get_misses)                                                                                            \
    X(get_expired)                                                                                           \
    X(get_flushed)                                                                                           \
    X(delete_misses)                                                                                         \
    X(delete_hits)                                                                                           \
    X(incr_misses)                                                                                           \
    X(incr_hits)                                                                                             \
    X(decr_misses)                                                                                           \
    X(decr_hits)                                                                                             \
    X(cas_misses)                                                                                            \
    X(cas_hits)                                                                                              \
    X(cas_badval)                                                                                            \
    X(touch_hits)                                                                                            \
    X(touch_misses)                                                                                          \
    X(store_too_large)                                                                                       \
    X(store_no_memory)                                                                                       \
    X(bytes)                                                                                                 \
    X(curr_items)                                                                                            \
    X(total_items)                                                                                           \
    X(expired_unfetched)                                                                                     \
    X(evicted_unfetched)                                                                                     \
    X(evictions)                                                                                             \
    X(reclaimed)                                                                                             \
    X(slab_reassigns)                                                                                        \
    X(slab_reassign_rescues)                                                                                 \
    X(slab_reassign_evictions_nomem)                                                                         \
    X(total_malloced)                                                                                        \
    X(hash_bytes)

/// One shard's counters (or their sum over shards).
struct store_stats {
#define SHOAL_KV_FIELD(name) uint64_t name = 0;
    SHOAL_KV_STORE_STATS(SHOAL_KV_FIELD)
#undef SHOAL_KV_FIELD

    /// Adds every counter of `o`.
    store_stats& operator+=(const store_stats& o) noexcept {
#define SHOAL_KV_ADD(name) name += o.name;
        SHOAL_KV_STORE_STATS(SHOAL_KV_ADD)
#undef SHOAL_KV_ADD
        return *this;
    }
};

} // namespace shoal::kv
