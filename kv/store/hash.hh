#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace shoal::kv {

namespace hash_detail {
constexpr uint64_t m = 0x9e3779b97f4a7c15ull;
/// The 128-bit multiply, folded to 64 bits.
inline uint64_t mix(uint64_t a, uint64_t b) noexcept {
    __uint128_t r = __uint128_t(a ^ 0xa0761d6478bd642full) * (b ^ 0xe7037ed1a0b428dbull);
    return uint64_t(r) ^ uint64_t(r >> 64);
}
/// The `n` (< 8) bytes at `p` as the low bytes of a little-endian word, the rest zero: what
/// `memcpy(&word, p, n)` into a zeroed word gives, in fixed-size loads (a copy of variable size
/// is a call into libc).
inline uint64_t load_tail(const char* p, size_t n) noexcept {
    uint64_t t = 0;
    unsigned at = 0;
    if (n & 4) {
        uint32_t w;
        std::memcpy(&w, p, 4);
        t = w;
        at = 4;
    }
    if (n & 2) {
        uint16_t w;
        std::memcpy(&w, p + at, 2);
        t |= uint64_t(w) << (at * 8);
        at += 2;
    }
    if (n & 1) {
        t |= uint64_t(uint8_t(p[at])) << (at * 8);
    }
    return t;
}
/// What `load_tail(end - n, n)` gives for `n` in 1..7, in one load of the eight bytes before
/// `end` (the caller knows they are readable: the string is at least eight bytes long).
inline uint64_t load_tail_before(const char* end, size_t n) noexcept {
    uint64_t w;
    std::memcpy(&w, end - 8, 8);
    return w >> (64 - 8 * n);
}
/// Whether the `n` bytes at `a` and `b` are equal, eight at a time, the last eight overlapping
/// the ones before (short keys: no libc call, no byte-wise tail).
inline bool same_bytes(const char* a, const char* b, size_t n) noexcept {
    if (n < 8) {
        return load_tail(a, n) == load_tail(b, n);
    }
    const char* a_last = a + n - 8;
    uint64_t x, y;
    for (; a < a_last; a += 8, b += 8) {
        std::memcpy(&x, a, 8);
        std::memcpy(&y, b, 8);
        if (x != y) {
            return false;
        }
    }
    std::memcpy(&x, a_last, 8);
    std::memcpy(&y, b + (a_last - a), 8);
    return x == y;
}
/// Folds `n` bytes at `p` into `h`, eight bytes per step. `readable_before`: the eight bytes
/// before `p` may be read (the value does not depend on it; a tail then takes one load). Always
/// inlined: a cached GET hashes and checks its key and record with it, and in the guest a call
/// costs more than the loop.
[[gnu::always_inline]] inline uint64_t fold(uint64_t h, const char* p, size_t n,
                                            bool readable_before = false) noexcept {
    readable_before |= n >= 8;
    while (n >= 8) {
        uint64_t w;
        std::memcpy(&w, p, 8);
        h = mix(h ^ w, m);
        p += 8;
        n -= 8;
    }
    const uint64_t tail = n == 0 ? 0 : readable_before ? load_tail_before(p + n, n) : load_tail(p, n);
    return mix(h ^ tail, m ^ n);
}
} // namespace hash_detail

/// The 64-bit hash of a key. Every shard and every client of the same build computes the same
/// value: the high 32 bits choose the shard (`shard_of`), the low bits the bucket of that
/// shard's table, so the two choices are independent. Eight bytes per step, multiply and fold.
inline uint64_t hash_key(std::string_view key) noexcept {
    using namespace hash_detail;
    uint64_t h = fold(0x243f6a8885a308d3ull ^ (key.size() * m), key.data(), key.size());
    return mix(h, h >> 29);
}

/// The shard that owns a key of hash `h` among `shards`.
inline unsigned shard_of(uint64_t h, unsigned shards) noexcept {
    return unsigned(((h >> 32) * shards) >> 32);
}

} // namespace shoal::kv
