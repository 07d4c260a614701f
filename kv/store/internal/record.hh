#pragma once

// The remotely readable record of an item (native RDMA protocol, record format 1): an item's
// chunk from its 56-byte header through the key and the value to a 16-byte trailer at the next
// 8-byte boundary. A client READs a whole record and validates it here, so a READ that races an
// overwrite, a delete, an eviction or the reuse of the chunk is detected, never returned.

#include "kv/store/hash.hh"
#include "kv/store/item.hh"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace shoal::kv::record {

/// The record format a server's location points at (the header layout is `kv::item`'s, on a
/// little-endian 64-bit host).
constexpr uint32_t format_version = 2;
/// Bytes of the trailer: the version (the item's CAS unique; 0 once unlinked) and a checksum.
constexpr size_t trailer_bytes = 16;

/// Offset of the trailer in a record of this key and value.
constexpr size_t trailer_offset(size_t key_len, size_t value_len) noexcept {
    return (sizeof(item) + key_len + value_len + 7) & ~size_t(7);
}
/// Bytes of a record of this key and value (what a READ of it fetches).
constexpr size_t bytes(size_t key_len, size_t value_len) noexcept {
    return trailer_offset(key_len, value_len) + trailer_bytes;
}

/// Folds `n` bytes at `p` into `h` as `hash_detail::fold` does (a 64x64→128 multiply per eight
/// bytes), but on four independent chains, 32 bytes per step, so that the multiplies overlap
/// (format 2; format 1 used the one chain of `fold`: ~1.6 µs for 4 KB, ~4× this).
[[gnu::always_inline]] inline uint64_t fold4(uint64_t h, const char* p, size_t n) noexcept {
    using namespace hash_detail;
    const bool whole_steps = n >= 32;
    if (whole_steps) {
        uint64_t a = h, b = h ^ m, c = h + m, d = ~h;
        for (; n >= 32; p += 32, n -= 32) {
            uint64_t w[4];
            std::memcpy(w, p, sizeof(w));
            a = mix(a ^ w[0], m);
            b = mix(b ^ w[1], m);
            c = mix(c ^ w[2], m);
            d = mix(d ^ w[3], m);
        }
        h = mix(mix(a, b), mix(c, d));
    }
    return fold(h, p, n, whole_steps);
}

/// 64-bit checksum of a record's version, flags, exptime, key and value (multiply-fold, as
/// `hash_key`; the value on four chains, `fold4`). A torn READ mixes the bytes of two versions
/// of a chunk: every word that differs goes through a full multiply of its chain, so the mix
/// matches the trailer's checksum with a chance of about 2^-64, as with one chain.
[[gnu::always_inline]] inline uint64_t checksum(uint64_t version, uint32_t flags, uint32_t exptime,
                                                std::string_view key, std::string_view value) noexcept {
    using namespace hash_detail;
    uint64_t h = mix(version, m ^ (uint64_t(flags) << 32 | exptime));
    h = fold(mix(h ^ key.size(), m), key.data(), key.size());
    h = fold4(mix(h ^ value.size(), m), value.data(), value.size());
    return h ? h : 1;
}

/// Writes `it`'s trailer (its CAS unique is the version): the record becomes valid.
inline void seal(item* it) noexcept {
    char* t = reinterpret_cast<char*>(it) + trailer_offset(it->key_len, it->value_len);
    uint64_t words[2] = {it->cas, checksum(it->cas, it->client_flags, it->exptime, it->key(), it->value())};
    std::memcpy(t, words, sizeof(words));
}

/// Clears `it`'s trailer version: a READ of the record from now on fails validation.
inline void invalidate(item* it) noexcept {
    char* t = reinterpret_cast<char*>(it) + trailer_offset(it->key_len, it->value_len);
    uint64_t zero = 0;
    std::memcpy(t, &zero, sizeof(zero));
}

/// What a validated record holds (views into the READ buffer).
struct view {
    std::string_view value;
    uint32_t flags = 0;
    uint32_t exptime = 0;
    uint64_t version = 0;
};

/// Why a READ record is or is not the value of the key.
enum class check {
    ok,        ///< the current value of the key when it was read
    short_buf, ///< the buffer is shorter than the record its header announces
    dead,      ///< the item was deleted, overwritten, evicted or expired (version 0)
    other_key, ///< the chunk holds another key now
    torn,      ///< header, value and trailer do not agree (a racing update or reuse)
};

/// Validates a record READ into `buf` (`len` bytes) as the value of `key`; fills `*out` on ok.
/// Always inlined, as `checksum`: they run in every cached GET's completion (no call).
[[gnu::always_inline]] inline check validate(const char* buf, size_t len, std::string_view key,
                                             view* out) noexcept {
    if (len < sizeof(item) + trailer_bytes) {
        return check::short_buf;
    }
    item h;
    std::memcpy(&h, buf, sizeof(item));
    if (h.key_len != key.size()) {
        return check::other_key;
    }
    size_t need = bytes(h.key_len, h.value_len);
    if (need > len) {
        return check::short_buf;
    }
    std::string_view k(buf + sizeof(item), h.key_len);
    if (!hash_detail::same_bytes(k.data(), key.data(), k.size())) {
        return check::other_key;
    }
    uint64_t t[2];
    std::memcpy(t, buf + trailer_offset(h.key_len, h.value_len), sizeof(t));
    if (t[0] == 0) {
        return check::dead;
    }
    std::string_view v(buf + sizeof(item) + h.key_len, h.value_len);
    if (t[0] != h.cas || t[1] != checksum(h.cas, h.client_flags, h.exptime, k, v)) {
        return check::torn;
    }
    *out = {v, h.client_flags, h.exptime, h.cas};
    return check::ok;
}

} // namespace shoal::kv::record
