#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace shoal::kv_app {

/// splitmix64: a well-mixed 64-bit function of `x` (seeds and per-key draws).
inline uint64_t splitmix64(uint64_t x) noexcept {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/// A uniform double in [0, 1) from one draw of `rng` (53 random bits).
inline double unit_interval(std::mt19937_64& rng) noexcept {
    return double(rng() >> 11) * 0x1.0p-53;
}

/// Which keys a benchmark asks for: an index in [0, size()), uniform or Zipf-distributed (index
/// i has the probability of rank i + 1, proportional to (i + 1)^-s: index 0 is the most popular).
/// Zipf draws use Hörmann and Derflinger's rejection-inversion: O(1) time and memory per draw
/// whatever the key space, exact (no table, no truncation of the tail).
class key_distribution {
public:
    /// Uniform over 10,000 keys.
    key_distribution() noexcept = default;
    /// Uniform over `n` keys (n ≥ 1).
    static key_distribution uniform(uint64_t n);
    /// Zipf with exponent `s` (0 < s ≤ 10) over `n` keys (n ≥ 1).
    static key_distribution zipf(uint64_t n, double s);
    /// "uniform" or "zipf:S" over `n` keys; throws std::invalid_argument saying what is wrong.
    static key_distribution parse(std::string_view spec, uint64_t n);

    /// One key index in [0, size()).
    uint64_t operator()(std::mt19937_64& rng) const noexcept;
    /// The number of keys.
    uint64_t size() const noexcept { return _n; }
    /// Whether keys are Zipf-distributed (else uniform).
    bool is_zipf() const noexcept { return _s > 0; }
    /// Zipf's exponent (0 when uniform).
    double exponent() const noexcept { return _s; }
    /// "uniform" or "zipf:S", as parsed.
    std::string describe() const;

private:
    double h(double x) const noexcept;
    double h_integral(double x) const noexcept;
    double h_integral_inverse(double x) const noexcept;

    uint64_t _n = 10000;
    double _s = 0;
    double _h_integral_x1 = 0; ///< H(1.5) - 1
    double _h_integral_n = 0;  ///< H(n + 0.5)
    double _squeeze = 0;       ///< draws within this of their rank are accepted without a test
};

/// Value sizes: fixed, uniform in [min, max], or a list of sizes with weights.
class size_distribution {
public:
    /// Fixed at 32 bytes.
    size_distribution() = default;
    /// Parses "N", "MIN-MAX" or "SIZE:WEIGHT,SIZE:WEIGHT,..." (sizes accept K and M suffixes,
    /// weights are positive numbers, normalised); throws std::invalid_argument saying what is wrong.
    static size_distribution parse(std::string_view spec);

    /// The size at quantile `u` in [0, 1): a draw when `u` is uniform.
    size_t at(double u) const noexcept;
    /// One draw.
    size_t operator()(std::mt19937_64& rng) const noexcept { return at(unit_interval(rng)); }
    /// The smallest and largest possible sizes.
    size_t min() const noexcept { return _min; }
    size_t max() const noexcept { return _max; }
    /// The mean size.
    double mean() const noexcept;
    /// The specification, normalised ("32", "32-16384", "100:0.5,1000:0.3,10000:0.2").
    std::string describe() const;

private:
    size_t _min = 32, _max = 32;
    std::vector<size_t> _sizes; ///< a weighted list (empty: uniform in [_min, _max])
    std::vector<double> _cdf;   ///< cumulative weights of `_sizes`, the last 1
};

/// The value a look-aside cache client stores for key index `k`: its size drawn from the size
/// distribution by the key alone (so every connection and every run agrees), its bytes the key's
/// name, '|', then a stretch of a seeded random pattern starting at an offset derived from the key.
/// A hit can be checked byte for byte; a value of another key or a corrupted one does not match.
class key_values {
public:
    /// Values of sizes from `sizes`; `seed` picks the pattern and the key-to-size mapping.
    key_values(size_distribution sizes, uint64_t seed);

    /// The size of key `k`'s value.
    size_t size_of(uint64_t k) const noexcept;
    /// Appends key `k`'s value (`key` is its name).
    void append(std::string& out, uint64_t k, std::string_view key) const;
    /// Whether `data` is exactly key `k`'s value.
    bool matches(uint64_t k, std::string_view key, std::string_view data) const noexcept;

private:
    static constexpr size_t offsets = 4096;

    uint64_t mix(uint64_t k) const noexcept;
    /// Where key `k`'s stretch of the pattern starts.
    size_t offset_of(uint64_t k) const noexcept;

    size_distribution _sizes;
    uint64_t _seed;
    std::string _pattern; ///< the largest value plus `offsets` random bytes
};

} // namespace shoal::kv_app
