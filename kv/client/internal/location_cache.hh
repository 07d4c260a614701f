#pragma once
// The RDMA client's cache of record locations: key → where the key's record lies on its server,
// what a cached GET READs without asking the server (docs/kv.md). Looked up once per cached GET,
// so the lookup stays inline and cheap: the key's `hash_key` (no libc call), a power-of-two
// table (no division), linear probing over 64-byte slots, keys compared eight bytes at a time.

#include "kv/store/hash.hh"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shoal::kv::internal {

/// Where a key's record lies on the server: the READ of a cached GET.
struct record_location {
    uint64_t addr = 0;  ///< the record's address in the server's registered memory
    uint32_t rkey = 0;  ///< the key of the region (or window) that covers it
    uint32_t len = 0;   ///< the record's bytes (what the READ fetches)
    unsigned shard = 0; ///< the server shard that owns the key
};

/// Key → `record_location`, at most `limit` entries. When full, a new key evicts an entry the
/// probe meets first (any victim: a wrong guess only costs the evicted key a control round
/// trip). Deletion shifts the entries behind back into place (no tombstones), so lookups stay
/// short however long the cache lives. The table doubles as entries come, up to the power of two
/// at or above twice the limit (at most half full). Not thread-safe: one per client, on its shard.
class location_cache {
public:
    /// A cache of at most `limit` locations (0: nothing is ever cached).
    explicit location_cache(size_t limit) noexcept
        : _limit(limit) {}

    /// The location of `key`, or null. Valid until the next change to the cache.
    [[gnu::always_inline]] const record_location* find(std::string_view key) const noexcept {
        if (_size == 0) {
            return nullptr;
        }
        const slot& s = _slots[probe(key, hash_key(key))];
        return s.key.empty() ? nullptr : &s.loc;
    }

    /// Sets the location of `key` (non-empty), evicting another key's when the cache is full.
    void put(std::string_view key, const record_location& loc) {
        if (_limit == 0 || key.empty()) {
            return;
        }
        if ((_slots.empty() || (_size + 1) * 2 > _slots.size()) && _size < _limit) {
            grow();
        }
        const uint64_t h = hash_key(key);
        size_t i = probe(key, h);
        if (_slots[i].key.empty() && _size >= _limit) {
            // Full: the first entry from the key's home slot on goes (any victim), and the probe
            // runs again, as the shift may have moved the free slot.
            erase_at(first_used_from(h & _mask));
            i = probe(key, h);
        }
        slot& s = _slots[i];
        if (s.key.empty()) {
            s.hash = h;
            s.key.assign(key.data(), key.size());
            ++_size;
        }
        s.loc = loc;
    }

    /// Forgets `key`'s location (none: nothing happens).
    void erase(std::string_view key) noexcept {
        if (_size == 0) {
            return;
        }
        const size_t i = probe(key, hash_key(key));
        if (!_slots[i].key.empty()) {
            erase_at(i);
        }
    }

    /// Forgets every location (the table's memory stays for the next ones).
    void clear() noexcept {
        for (slot& s : _slots) {
            s.key.clear();
        }
        _size = 0;
    }

    /// Locations cached.
    size_t size() const noexcept { return _size; }
    /// The most locations it holds.
    size_t limit() const noexcept { return _limit; }

private:
    /// 64 bytes: one cache line per probe step. Free when `key` is empty (keys never are).
    struct slot {
        uint64_t hash = 0;
        std::string key;
        record_location loc;
    };

    /// The slot holding `key` (hash `h`), else the free slot where its probe ends (the table is
    /// never full, so there is one).
    [[gnu::always_inline]] size_t probe(std::string_view key, uint64_t h) const noexcept {
        size_t i = h & _mask;
        for (;; i = (i + 1) & _mask) {
            const slot& s = _slots[i];
            if (s.key.empty() || (s.hash == h && s.key.size() == key.size() &&
                                  hash_detail::same_bytes(s.key.data(), key.data(), key.size()))) {
                return i;
            }
        }
    }

    size_t first_used_from(size_t i) const noexcept {
        while (_slots[i].key.empty()) {
            i = (i + 1) & _mask;
        }
        return i;
    }

    /// Frees slot `i`, moving back each entry after it that the hole separates from its home.
    void erase_at(size_t i) noexcept {
        for (size_t j = (i + 1) & _mask; !_slots[j].key.empty(); j = (j + 1) & _mask) {
            const size_t home = _slots[j].hash & _mask;
            // Entry j may stay when its home lies cyclically in (i, j]: a probe from there
            // reaches it without crossing the hole.
            const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
            if (!stays) {
                _slots[i].hash = _slots[j].hash;
                _slots[i].key.swap(_slots[j].key);
                _slots[i].loc = _slots[j].loc;
                i = j;
            }
        }
        _slots[i].key.clear();
        --_size;
    }

    /// Doubles the table (16 slots first), at most to twice the limit rounded up to a power of
    /// two, and rehashes.
    void grow() {
        size_t n = _slots.empty() ? 16 : _slots.size() * 2;
        std::vector<slot> old = std::exchange(_slots, std::vector<slot>(n));
        _mask = n - 1;
        for (slot& s : old) {
            if (s.key.empty()) {
                continue;
            }
            size_t i = s.hash & _mask;
            while (!_slots[i].key.empty()) {
                i = (i + 1) & _mask;
            }
            _slots[i].hash = s.hash;
            _slots[i].key = std::move(s.key);
            _slots[i].loc = s.loc;
        }
    }

    std::vector<slot> _slots;
    size_t _mask = 0;
    size_t _size = 0;
    size_t _limit;
};

} // namespace shoal::kv::internal
