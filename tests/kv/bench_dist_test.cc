// shoal-kv-bench's distributions: Zipf rank frequencies against the exact probabilities, the
// value-size forms (fixed, range, weighted list), their parse errors, and key-derived values.

#include "apps/kv/bench_dist.hh"

#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal::kv_app;

namespace {

/// The message of the std::invalid_argument `f` throws ("" when it throws none).
template <typename F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "";
}

/// Whether `count` of `draws` is within 5 standard deviations of a binomial with probability `p`.
void expect_frequency(uint64_t count, uint64_t draws, double p, const std::string& what) {
    double sigma = std::sqrt(double(draws) * p * (1 - p));
    EXPECT_NEAR(double(count), double(draws) * p, 5 * sigma + 1) << what;
}

} // namespace

class zipf_frequencies : public ::testing::TestWithParam<double> {};

// Rank frequencies over 2,000,000 draws follow k^-s / H(n, s) within 5 sigma for the 50 most
// popular keys, the tail beyond them as a whole, and the ratio of the first two ranks is 2^s.
TEST_P(zipf_frequencies, follow_the_exponent) {
    const double s = GetParam();
    const uint64_t n = 1000, draws = 2'000'000;
    key_distribution d = key_distribution::zipf(n, s);
    std::vector<double> p(n);
    double h = 0;
    for (uint64_t k = 0; k < n; ++k) {
        h += std::pow(double(k + 1), -s);
    }
    for (uint64_t k = 0; k < n; ++k) {
        p[k] = std::pow(double(k + 1), -s) / h;
    }
    std::mt19937_64 rng(42);
    std::vector<uint64_t> count(n);
    for (uint64_t i = 0; i < draws; ++i) {
        uint64_t k = d(rng);
        ASSERT_LT(k, n);
        ++count[k];
    }
    double tail_p = 0;
    uint64_t tail = 0;
    for (uint64_t k = 0; k < n; ++k) {
        if (k < 50) {
            expect_frequency(count[k], draws, p[k], "rank " + std::to_string(k + 1));
        } else {
            tail_p += p[k];
            tail += count[k];
        }
    }
    expect_frequency(tail, draws, tail_p, "ranks 51..1000");
    EXPECT_NEAR(double(count[0]) / double(count[1]), std::pow(2.0, s), 0.05 * std::pow(2.0, s));
    // The least popular keys are drawn too (no truncated tail) where they are expected 20+ times.
    if (p[n - 1] * double(draws) >= 20) {
        EXPECT_GT(count[n - 1], 0u);
    }
}

INSTANTIATE_TEST_SUITE_P(exponents, zipf_frequencies, ::testing::Values(0.5, 0.9, 1.0, 1.1, 2.0));

// A key space of ten million: the most popular key's probability is 1 / H(n, s), every draw in range.
TEST(zipf, large_key_space) {
    const uint64_t n = 10'000'000, draws = 1'000'000;
    key_distribution d = key_distribution::zipf(n, 0.9);
    double h = 0;
    for (uint64_t k = 1; k <= n; ++k) {
        h += std::pow(double(k), -0.9);
    }
    std::mt19937_64 rng(7);
    uint64_t first = 0, beyond_million = 0;
    for (uint64_t i = 0; i < draws; ++i) {
        uint64_t k = d(rng);
        ASSERT_LT(k, n);
        first += k == 0;
        beyond_million += k >= 1'000'000;
    }
    expect_frequency(first, draws, 1 / h, "rank 1");
    EXPECT_GT(beyond_million, 0u);
}

// The same seed gives the same keys; another seed other keys.
TEST(zipf, seeded_and_reproducible) {
    key_distribution d = key_distribution::zipf(100000, 1.1);
    std::mt19937_64 a(5), b(5), c(6);
    std::vector<uint64_t> ka, kb, kc;
    for (int i = 0; i < 1000; ++i) {
        ka.push_back(d(a));
        kb.push_back(d(b));
        kc.push_back(d(c));
    }
    EXPECT_EQ(ka, kb);
    EXPECT_NE(ka, kc);
}

// Uniform keys: every key about equally often.
TEST(key_distribution, uniform) {
    key_distribution d = key_distribution::parse("uniform", 10);
    EXPECT_FALSE(d.is_zipf());
    EXPECT_EQ(d.describe(), "uniform");
    std::mt19937_64 rng(1);
    std::vector<uint64_t> count(10);
    for (int i = 0; i < 100000; ++i) {
        ++count[d(rng)];
    }
    for (uint64_t c : count) {
        expect_frequency(c, 100000, 0.1, "uniform");
    }
}

TEST(key_distribution, parses_zipf) {
    key_distribution d = key_distribution::parse("zipf:0.9", 1000);
    EXPECT_TRUE(d.is_zipf());
    EXPECT_DOUBLE_EQ(d.exponent(), 0.9);
    EXPECT_EQ(d.size(), 1000u);
    EXPECT_EQ(d.describe(), "zipf:0.9");
}

// Bad specifications say which option, what was given and what is expected.
TEST(key_distribution, parse_errors_are_clear) {
    for (const char* bad : {"zipf", "zipf:", "zipf:abc", "zipf:0", "zipf:-1", "zipf:11", "zipf: 1", "zipf:1x",
                            "zipf:nan", "pareto", ""}) {
        std::string e = error_of([&] { key_distribution::parse(bad, 100); });
        EXPECT_NE(e.find("--key-dist '" + std::string(bad) + "'"), std::string::npos) << bad << ": " << e;
        EXPECT_NE(e.find("zipf"), std::string::npos) << bad << ": " << e;
    }
    EXPECT_NE(error_of([] { key_distribution::zipf(0, 1); }), "");
}

// The weighted list: each size as often as its weight says; min, max, mean and the normalised form.
TEST(size_distribution, weighted_list) {
    size_distribution d = size_distribution::parse("100:0.5,1000:0.3,10000:0.2");
    EXPECT_EQ(d.min(), 100u);
    EXPECT_EQ(d.max(), 10000u);
    EXPECT_DOUBLE_EQ(d.mean(), 0.5 * 100 + 0.3 * 1000 + 0.2 * 10000);
    EXPECT_EQ(d.describe(), "100:0.5,1000:0.3,10000:0.2");
    std::mt19937_64 rng(3);
    std::map<size_t, uint64_t> count;
    const uint64_t draws = 200000;
    for (uint64_t i = 0; i < draws; ++i) {
        ++count[d(rng)];
    }
    ASSERT_EQ(count.size(), 3u);
    expect_frequency(count[100], draws, 0.5, "100");
    expect_frequency(count[1000], draws, 0.3, "1000");
    expect_frequency(count[10000], draws, 0.2, "10000");
    // Quantiles at the edges.
    EXPECT_EQ(d.at(0), 100u);
    EXPECT_EQ(d.at(0.49), 100u);
    EXPECT_EQ(d.at(0.51), 1000u);
    EXPECT_EQ(d.at(0.999999), 10000u);
}

// Weights need not add up to one; sizes take K and M suffixes.
TEST(size_distribution, weights_are_normalised_and_sizes_have_suffixes) {
    size_distribution d = size_distribution::parse("1K:1,2K:3");
    EXPECT_EQ(d.min(), 1024u);
    EXPECT_EQ(d.max(), 2048u);
    EXPECT_DOUBLE_EQ(d.mean(), 0.25 * 1024 + 0.75 * 2048);
    EXPECT_EQ(d.describe(), "1024:0.25,2048:0.75");
}

// A range: every size in [min, max], both ends reached, the mean in the middle.
TEST(size_distribution, uniform_range) {
    size_distribution d = size_distribution::parse("32-16384");
    EXPECT_EQ(d.describe(), "32-16384");
    EXPECT_DOUBLE_EQ(d.mean(), (32 + 16384) / 2.0);
    std::mt19937_64 rng(9);
    size_t lo = SIZE_MAX, hi = 0;
    double sum = 0;
    const int draws = 1'000'000;
    for (int i = 0; i < draws; ++i) {
        size_t v = d(rng);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        sum += double(v);
    }
    EXPECT_EQ(lo, 32u);
    EXPECT_EQ(hi, 16384u);
    EXPECT_NEAR(sum / draws, d.mean(), 30);
}

TEST(size_distribution, fixed) {
    size_distribution d = size_distribution::parse("4K");
    std::mt19937_64 rng(1);
    for (int i = 0; i < 100; ++i) {
        EXPECT_EQ(d(rng), 4096u);
    }
    EXPECT_EQ(d.describe(), "4096");
}

TEST(size_distribution, parse_errors_are_clear) {
    for (const char* bad : {"", "abc", "100:", "100:0", "100:-1", "100:x", "x:0.5", "100:0.5,,1000:0.5",
                            "100:0.5,1000", "200-100", "10-abc", "-5", "1,2"}) {
        std::string e = error_of([&] { size_distribution::parse(bad); });
        EXPECT_NE(e.find("--value-size '" + std::string(bad) + "'"), std::string::npos) << bad << ": " << e;
    }
    EXPECT_NE(error_of([] { size_distribution::parse("100:0.5,1000"); }).find("SIZE:WEIGHT"),
              std::string::npos);
    EXPECT_NE(error_of([] { size_distribution::parse("200-100"); }).find("MIN <= MAX"), std::string::npos);
    EXPECT_NE(error_of([] { size_distribution::parse("100:0"); }).find("positive"), std::string::npos);
}

// A key's value: its size from the distribution, its own bytes; another key's value, a changed
// byte, a short or long value do not match. The same seed gives the same values.
TEST(key_values, derived_from_the_key_and_checked_byte_for_byte) {
    size_distribution sizes = size_distribution::parse("5-300");
    key_values v(sizes, 11), same(sizes, 11), other(sizes, 12);
    std::map<size_t, int> lengths;
    int differ = 0;
    for (uint64_t k = 0; k < 2000; ++k) {
        std::string key = "key:" + std::to_string(100000000 + k).substr(1);
        std::string value;
        v.append(value, k, key);
        ASSERT_EQ(value.size(), v.size_of(k));
        ASSERT_GE(value.size(), 5u);
        ASSERT_LE(value.size(), 300u);
        ++lengths[value.size()];
        EXPECT_TRUE(v.matches(k, key, value));
        EXPECT_TRUE(same.matches(k, key, value));
        differ += !other.matches(k, key, value);
        if (value.size() > key.size() + 1) {
            std::string changed = value;
            changed.back() ^= 1;
            EXPECT_FALSE(v.matches(k, key, changed));
        }
        EXPECT_FALSE(v.matches(k, key, value + "x"));
        EXPECT_FALSE(v.matches(k, key, std::string_view(value).substr(0, value.size() - 1)));
        // Key k + 1's value in place of key k's (a reply for the wrong key) does not match, once
        // the value is long enough to hold the key's whole name.
        std::string next = "key:" + std::to_string(100000000 + k + 1).substr(1);
        std::string next_value;
        v.append(next_value, k + 1, next);
        if (value.size() > key.size()) {
            EXPECT_FALSE(v.matches(k, key, next_value));
        }
    }
    EXPECT_GT(lengths.size(), 100u); // sizes spread over the range
    EXPECT_GT(differ, 1900);         // another seed, other values (same size and prefix: rare)
}
