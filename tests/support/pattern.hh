#pragma once

// The byte pattern the data-path tests write and check: byte `i` of stream or region offset `i`
// depends on the offset and a seed, so a reordered, shifted or foreign byte is found.

#include <cstddef>
#include <cstdint>

namespace shoal::testing {

/// Byte `i` of the test pattern with `seed`.
inline char pattern_byte(size_t i, unsigned seed) {
    return char((i * 131 + seed * 7 + (i >> 13)) & 0xff);
}

/// Writes `n` pattern bytes to `p`, those of offsets `from` to `from + n`.
inline void fill_pattern(char* p, size_t n, unsigned seed, size_t from = 0) {
    for (size_t i = 0; i < n; ++i) {
        p[i] = pattern_byte(from + i, seed);
    }
}

/// Index in `p` of the first byte that differs from the pattern at offset `from`, or SIZE_MAX.
inline size_t check_pattern(const char* p, size_t n, unsigned seed, size_t from = 0) {
    for (size_t i = 0; i < n; ++i) {
        if (p[i] != pattern_byte(from + i, seed)) {
            return i;
        }
    }
    return SIZE_MAX;
}

} // namespace shoal::testing
