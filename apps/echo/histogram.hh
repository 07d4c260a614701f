#pragma once

#include <array>
#include <cstdint>

namespace shoal::echo {

/// A latency histogram with logarithmic buckets, HDR-style: values below 64 have a bucket each,
/// above that every power of two is split into 32 linear sub-buckets, so any recorded value is
/// known within 1/64 of itself (±1.6%) over the whole 64-bit range, in a fixed 16 KB array.
/// Percentiles come from the buckets, never from averages. Recording is a few instructions.
class histogram {
public:
    /// Records one value (nanoseconds, or any unit).
    void record(uint64_t value) noexcept {
        ++_counts[index_of(value)];
        ++_count;
        _sum += value;
        if (value > _max) {
            _max = value;
        }
        if (value < _min) {
            _min = value;
        }
    }
    /// Adds every value of `o`.
    void merge(const histogram& o) noexcept;

    /// Values recorded.
    uint64_t count() const noexcept { return _count; }
    /// Largest value recorded (0 when empty).
    uint64_t max() const noexcept { return _count ? _max : 0; }
    /// Smallest value recorded (0 when empty).
    uint64_t min() const noexcept { return _count ? _min : 0; }
    /// Mean of the recorded values (0 when empty).
    double mean() const noexcept { return _count ? double(_sum) / double(_count) : 0.0; }
    /// The value at percentile `p` (0 to 100): the middle of the bucket holding the
    /// ceil(p% of count)-th smallest value, clamped to the recorded min and max.
    uint64_t percentile(double p) const noexcept;

    static constexpr unsigned sub_bits = 5;
    static constexpr unsigned buckets = 64 * 32;
    /// Bucket of `value`.
    static unsigned index_of(uint64_t value) noexcept {
        if (value < 64) {
            return unsigned(value);
        }
        unsigned msb = 63u - unsigned(__builtin_clzll(value));
        unsigned shift = msb - sub_bits;
        return shift * 32 + unsigned(value >> shift);
    }
    /// Smallest value of bucket `index`.
    static uint64_t lowest_of(unsigned index) noexcept {
        if (index < 64) {
            return index;
        }
        unsigned shift = index / 32 - 1;
        return uint64_t(index % 32 + 32) << shift;
    }
    /// Largest value of bucket `index`.
    static uint64_t highest_of(unsigned index) noexcept {
        if (index < 64) {
            return index;
        }
        unsigned shift = index / 32 - 1;
        return (uint64_t(index % 32 + 33) << shift) - 1;
    }

private:
    std::array<uint64_t, buckets> _counts{};
    uint64_t _count = 0;
    uint64_t _sum = 0;
    uint64_t _max = 0;
    uint64_t _min = UINT64_MAX;
};

} // namespace shoal::echo
