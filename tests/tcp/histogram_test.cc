// The echo benchmark's latency histogram.

#include "apps/echo/histogram.hh"

#include <gtest/gtest.h>

using shoal::echo::histogram;

TEST(EchoHistogram, BucketsCoverEveryValueWithinTwoPercent) {
    for (uint64_t v : {0ull, 1ull, 63ull, 64ull, 65ull, 127ull, 128ull, 1000ull, 123456789ull, ~0ull >> 1}) {
        unsigned i = histogram::index_of(v);
        ASSERT_LT(i, histogram::buckets);
        EXPECT_LE(histogram::lowest_of(i), v);
        EXPECT_GE(histogram::highest_of(i), v);
        EXPECT_LE(double(histogram::highest_of(i) - histogram::lowest_of(i)), double(v) / 32 + 1);
    }
    // Buckets are contiguous.
    for (unsigned i = 1; i < 40 * 32; ++i) {
        EXPECT_EQ(histogram::lowest_of(i), histogram::highest_of(i - 1) + 1) << i;
    }
}

TEST(EchoHistogram, Percentiles) {
    histogram h;
    for (uint64_t v = 1; v <= 1000; ++v) {
        h.record(v * 1000);
    }
    EXPECT_EQ(h.count(), 1000u);
    EXPECT_NEAR(double(h.percentile(50)), 500000, 500000 * 0.02);
    EXPECT_NEAR(double(h.percentile(90)), 900000, 900000 * 0.02);
    EXPECT_NEAR(double(h.percentile(99)), 990000, 990000 * 0.02);
    EXPECT_EQ(h.percentile(100), 1000000u);
    EXPECT_EQ(h.percentile(0), 1000u);
    histogram other;
    other.record(5);
    h.merge(other);
    EXPECT_EQ(h.count(), 1001u);
    EXPECT_EQ(h.min(), 5u);
}
