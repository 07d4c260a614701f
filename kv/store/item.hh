#pragma once

#include <cstdint>
#include <string_view>

namespace shoal::kv {

/// One stored key and value, in a chunk of a slab page: this header, then the key, then the
/// value (no terminator). Everything an item needs lives in its chunk, so a page of the shard's
/// (registrable) memory holds complete items. Owned by its shard's `store`; a reply being sent
/// from its memory holds a reference (`refs`), and the chunk is reused only once the store has
/// unlinked it and the last reference is gone.
struct item {
    item* prev;            ///< LRU neighbour towards the head (more recent); free list: unused
    item* next;            ///< LRU neighbour towards the tail; free list: next free chunk
    item* hash_next;       ///< next item of the same hash bucket
    uint64_t cas;          ///< CAS unique of the current value
    uint32_t exptime;      ///< Unix time at which it expires; 0: never
    uint32_t time;         ///< Unix time of the last store or access
    uint32_t client_flags; ///< the client's 32-bit flags
    uint32_t value_len;    ///< value bytes
    uint8_t key_len;       ///< key bytes (1..250)
    uint8_t cls;           ///< slab class
    uint8_t state;         ///< `linked`, `fetched`, `active`
    uint8_t page_hi;       ///< the store's index of the page holding this chunk, bits 16..23
    uint16_t refs;         ///< references held by replies in flight (`store::ref`)
    uint16_t page_lo;      ///< the page index, bits 0..15 (set when the chunk is carved, kept while free)

    static constexpr uint8_t linked = 1;  ///< in the hash table and an LRU
    static constexpr uint8_t fetched = 2; ///< read at least once since stored
    static constexpr uint8_t active = 4;  ///< read again since its last second chance at the LRU tail

    /// The key.
    std::string_view key() const noexcept { return {reinterpret_cast<const char*>(this + 1), key_len}; }
    /// The value.
    std::string_view value() const noexcept {
        return {reinterpret_cast<const char*>(this + 1) + key_len, value_len};
    }
    /// The value, writable (in-place incr/decr, filling a new item).
    char* value_data() noexcept { return reinterpret_cast<char*>(this + 1) + key_len; }
    /// The store's index of the page holding this chunk (store bookkeeping, not part of a record's
    /// meaning: remote readers ignore it).
    uint32_t page() const noexcept { return uint32_t(page_hi) << 16 | page_lo; }
    /// Records the page index of this chunk (below 2^24).
    void set_page(uint32_t p) noexcept {
        page_hi = uint8_t(p >> 16);
        page_lo = uint16_t(p);
    }
    /// Chunk bytes an item of this key and value needs.
    static size_t chunk_bytes(size_t key_len, size_t value_len) noexcept {
        return sizeof(item) + key_len + value_len;
    }
    /// The size memcached accounts for an item (its 48-byte header and the 8-byte CAS unique,
    /// key + NUL, value + CRLF): the `bytes` statistic and the max-item-size check use it, so
    /// both match memcached's to the byte.
    static uint64_t memcached_size(size_t key_len, size_t value_len) noexcept {
        return 56 + key_len + 1 + value_len + 2;
    }
};

static_assert(sizeof(item) == 56, "the item header stays 56 bytes");

} // namespace shoal::kv
