// The single-producer/single-consumer ring under the cross-shard queues.
#include "core/spsc_queue.hh"

#include <cstdint>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

using shoal::spsc_queue;

TEST(spsc_queue, push_pop_and_capacity) {
    spsc_queue<int, 8> q;
    EXPECT_TRUE(q.empty());
    int in[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    EXPECT_EQ(q.push(in, 10), 8u); // only what fits
    EXPECT_FALSE(q.empty());
    EXPECT_EQ(q.push(in, 1), 0u);
    int out[10] = {};
    EXPECT_EQ(q.pop(out, 3), 3u);
    EXPECT_EQ(out[0], 0);
    EXPECT_EQ(out[2], 2);
    EXPECT_EQ(q.push(in + 8, 2), 2u); // wraps around
    // The consumer may see a newer tail only once it has used up what it knew of: pop until empty.
    std::vector<int> got;
    size_t n;
    while ((n = q.pop(out, 10)) > 0) {
        got.insert(got.end(), out, out + n);
    }
    EXPECT_EQ(got, (std::vector<int>{3, 4, 5, 6, 7, 8, 9}));
    EXPECT_TRUE(q.empty());
    EXPECT_EQ(q.pop(out, 10), 0u);
}

TEST(spsc_queue, wraps_many_times) {
    spsc_queue<uint64_t, 4> q;
    uint64_t next_in = 0;
    uint64_t next_out = 0;
    for (int round = 0; round < 1000; ++round) {
        uint64_t batch[3];
        for (auto& b : batch) {
            b = next_in++;
        }
        ASSERT_EQ(q.push(batch, 3), 3u);
        uint64_t out[4];
        size_t n = q.pop(out, 4);
        ASSERT_EQ(n, 3u);
        for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(out[i], next_out++);
        }
    }
}

TEST(spsc_queue, two_threads_keep_order) {
    constexpr uint64_t total = 2'000'000;
    spsc_queue<uint64_t, 256> q;
    std::thread producer([&q] {
        uint64_t next = 0;
        uint64_t batch[37];
        while (next < total) {
            size_t n = 0;
            while (n < 37 && next + n < total) {
                batch[n] = next + n;
                ++n;
            }
            size_t pushed = q.push(batch, n);
            next += pushed;
            if (pushed == 0) {
                std::this_thread::yield();
            }
        }
    });
    uint64_t expected = 0;
    bool in_order = true;
    uint64_t out[64];
    while (expected < total) {
        size_t n = q.pop(out, 64);
        for (size_t i = 0; i < n; ++i) {
            in_order &= out[i] == expected++;
        }
        if (n == 0) {
            std::this_thread::yield();
        }
    }
    producer.join();
    EXPECT_TRUE(in_order);
    EXPECT_TRUE(q.empty());
}
