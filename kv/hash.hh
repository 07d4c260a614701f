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
/// Folds `n` bytes at `p` into `h`, eight bytes per step.
inline uint64_t fold(uint64_t h, const char* p, size_t n) noexcept {
    while (n >= 8) {
        uint64_t w;
        std::memcpy(&w, p, 8);
        h = mix(h ^ w, m);
        p += 8;
        n -= 8;
    }
    uint64_t tail = 0;
    if (n) {
        std::memcpy(&tail, p, n);
    }
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
