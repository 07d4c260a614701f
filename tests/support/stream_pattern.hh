#pragma once

// The test pattern (support/pattern.hh) over net streams and buffers. Needs shoal_net.

#include "core/coroutine.hh"
#include "net/stream.hh"
#include "net/temporary_buffer.hh"
#include "support/pattern.hh"

#include <algorithm>
#include <cstdint>
#include <string>

namespace shoal::testing {

/// `size` bytes of the pattern from offset 0.
inline net::temporary_buffer make_pattern(size_t size, unsigned seed = 1) {
    net::temporary_buffer b(size);
    fill_pattern(b.get_write(), size, seed);
    return b;
}

/// Writes `size` pattern bytes in writes of `chunk`, then flushes.
inline future<> write_pattern(net::output_stream& out, size_t size, unsigned seed, size_t chunk) {
    std::string block(std::min(size, chunk), '\0');
    for (size_t off = 0; off < size; off += chunk) {
        size_t n = std::min(chunk, size - off);
        fill_pattern(block.data(), n, seed, off);
        co_await out.write(block.data(), n);
    }
    co_await out.flush();
}

/// Reads until `n` bytes arrived (or end of stream) and checks them against the pattern from
/// offset 0; returns the number of bytes read and sets `mismatch` at the first wrong byte
/// (SIZE_MAX when none).
inline future<size_t> read_and_check(net::input_stream& in, size_t n, unsigned seed, size_t& mismatch) {
    size_t got = 0;
    mismatch = SIZE_MAX;
    while (got < n) {
        net::temporary_buffer b = co_await in.read_up_to(n - got);
        if (b.empty()) {
            break;
        }
        if (mismatch == SIZE_MAX) {
            size_t i = check_pattern(b.get(), b.size(), seed, got);
            if (i != SIZE_MAX) {
                mismatch = got + i;
            }
        }
        got += b.size();
    }
    co_return got;
}

/// Reads `size` bytes and checks the pattern; returns the offset of the first bad byte or
/// SIZE_MAX (and `size + 1` when the stream ended early).
inline future<size_t> read_pattern(net::input_stream& in, size_t size, unsigned seed) {
    size_t bad = SIZE_MAX;
    size_t got = co_await read_and_check(in, size, seed, bad);
    co_return got < size ? size + 1 : bad;
}

} // namespace shoal::testing
