// net::foreign_buffer on two shards: a payload forwarded to another shard while the home shard
// keeps slicing the same buffer; the memory is released once, on its home shard.

#include "test_util.hh"

#include "core/future_util.hh"
#include "core/smp.hh"
#include "core/timer.hh"
#include "net/foreign_buffer.hh"

#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::net;
using namespace shoal::tcp_test;
using namespace std::chrono_literals;

namespace {

/// Where and how often a `home_owner` was released (read from any thread after the engine ran).
std::atomic<int> released_on{-1};
std::atomic<int> releases{0};

/// Heap bytes whose owner records the shard that released it. Not thread-safe by design, like
/// every buffer_owner: the test proves only its home shard touches it.
class home_owner final : public buffer_owner {
public:
    static temporary_buffer make(size_t size) {
        auto* o = new home_owner(size);
        for (size_t i = 0; i < size; ++i) {
            o->_bytes[i] = pattern_byte(i, 5);
        }
        return temporary_buffer(o->_bytes.data(), size, o);
    }

private:
    explicit home_owner(size_t size)
        : _bytes(size) {}
    void release() noexcept override {
        released_on = int(this_shard_id());
        ++releases;
        delete this;
    }
    std::vector<char> _bytes;
};

/// Sums bytes (the remote shard's "work" on the payload).
uint64_t sum(const temporary_buffer& b) {
    uint64_t s = 0;
    for (char c : b.view()) {
        s += uint8_t(c);
    }
    return s;
}

future<> forward_while_the_home_shard_keeps_slicing() {
    released_on = -1;
    releases = 0;
    constexpr size_t size = 64 << 10;
    constexpr size_t piece = 4096; // above the copy threshold: shared, not copied
    temporary_buffer conn = home_owner::make(size);
    // Batches of 32 in flight (well under a shard pair's message ring).
    for (unsigned batch = 0; batch < 64; ++batch) {
        std::vector<future<uint64_t>> remote;
        std::vector<uint64_t> expected;
        for (unsigned j = 0; j < 32; ++j) {
            unsigned i = batch * 32 + j;
            size_t off = (i * 977) % (size - piece);
            temporary_buffer payload = conn.share(off, piece);
            expected.push_back(i % 3 == 2 ? 0 : sum(payload));
            foreign_buffer fb(payload);
            payload.reset();
            remote.push_back(submit_to(1, [fb = std::move(fb), i]() mutable -> uint64_t {
                if (i % 3 == 2) {
                    return 0; // dropped without take(): the home reference still goes home
                }
                temporary_buffer b = std::move(fb).take();
                temporary_buffer head = b.share(0, 100); // slices on the remote shard are local
                temporary_buffer tail = b.share(100, b.size() - 100);
                b.reset();
                return sum(head) + sum(tail);
            }));
            // Meanwhile the connection keeps slicing the same buffer on its shard.
            for (int k = 0; k < 4; ++k) {
                temporary_buffer s = conn.share(size_t(k) * 100, 50);
                s.trim_front(1);
            }
        }
        auto sums = co_await when_all_succeed(std::move(remote));
        EXPECT_EQ(sums, expected) << "batch " << batch;
    }
    EXPECT_EQ(releases.load(), 0) << "released while the connection still holds it";
    conn.reset();
    // The last home references come back asynchronously.
    auto deadline = steady_clock_type::now() + 30s;
    while (releases.load() == 0 && steady_clock_type::now() < deadline) {
        co_await sleep(1ms);
    }
    EXPECT_EQ(releases.load(), 1);
    EXPECT_EQ(released_on.load(), 0) << "released away from its home shard";
}

future<> small_buffers_are_copied_and_the_home_buffer_goes_at_once() {
    released_on = -1;
    releases = 0;
    temporary_buffer b = home_owner::make(foreign_buffer::copy_threshold);
    foreign_buffer fb(b);
    b.reset(); // the copy holds no home reference
    EXPECT_EQ(releases.load(), 1);
    // (The lambda is made outside the co_await expression: GCC 12 mishandles move-only
    // captures of a temporary there.)
    auto remote = submit_to(1, [fb = std::move(fb)]() mutable {
        temporary_buffer t = std::move(fb).take();
        return std::string(t.view());
    });
    std::string got = co_await std::move(remote);
    std::string want(foreign_buffer::copy_threshold, '\0');
    for (size_t i = 0; i < want.size(); ++i) {
        want[i] = pattern_byte(i, 5);
    }
    EXPECT_EQ(got, want);
}

future<> taken_on_the_home_shard() {
    released_on = -1;
    releases = 0;
    temporary_buffer b = home_owner::make(4096);
    foreign_buffer fb(b);
    b.reset();
    EXPECT_EQ(releases.load(), 0);
    temporary_buffer back = std::move(fb).take();
    EXPECT_TRUE(fb.empty());
    EXPECT_EQ(back.size(), 4096u);
    back.reset();
    EXPECT_EQ(releases.load(), 1);
    co_return;
}

} // namespace

TEST(ForeignBuffer, ForwardedWhileTheHomeShardKeepsSlicing) {
    EXPECT_EQ(run_in_shards(2, forward_while_the_home_shard_keeps_slicing), 0);
}

TEST(ForeignBuffer, SmallBuffersAreCopied) {
    EXPECT_EQ(run_in_shards(2, small_buffers_are_copied_and_the_home_buffer_goes_at_once), 0);
}

TEST(ForeignBuffer, TakenOnTheHomeShard) {
    EXPECT_EQ(run_in_shards(1, taken_on_the_home_shard), 0);
}

namespace {

/// A buffer_owner that stays home (as RDMA pool buffers do): drops on another shard are sent
/// home. Counts, per shard, the decrements of its (non-atomic) count, and where it was released.
std::atomic<int> homed_released_on{-1};
std::atomic<int> homed_elsewhere{0};
std::atomic<int> homed_foreign_decrements{0};

class homed_owner final : public buffer_owner {
public:
    static temporary_buffer make(size_t size) {
        auto* o = new homed_owner(size);
        return temporary_buffer(o->_bytes.data(), size, o);
    }

private:
    explicit homed_owner(size_t size)
        : _bytes(size)
        , _home_shard(this_shard_id()) {
        stay_home();
    }
    void release() noexcept override {
        homed_released_on = int(this_shard_id());
        delete this;
    }
    void unref_elsewhere() noexcept override {
        ++homed_elsewhere;
        (void)submit_to(_home_shard, [this] {
            if (this_shard_id() != _home_shard) {
                ++homed_foreign_decrements;
            }
            unref();
        });
    }
    std::vector<char> _bytes;
    unsigned _home_shard;
};

future<> slices_dropped_on_another_shard_are_dropped_at_home() {
    homed_released_on = -1;
    homed_elsewhere = 0;
    temporary_buffer b = homed_owner::make(4096);
    constexpr int n = 64;
    std::vector<temporary_buffer> away;
    for (int i = 0; i < n; ++i) {
        away.push_back(b.share(size_t(i) * 64, 64));
    }
    // Shard 1 drops its slices while this shard keeps and drops slices of the same buffer.
    auto remote = submit_to(1, [away = std::move(away)]() mutable {
        away.clear();
        return make_ready_future<>();
    });
    for (int i = 0; i < n; ++i) {
        temporary_buffer mine = b.share(0, 8);
        co_await yield();
    }
    co_await std::move(remote);
    EXPECT_EQ(homed_elsewhere.load(), n) << "every drop on shard 1 was sent home";
    b.reset();
    for (int i = 0; i < 100 && homed_released_on.load() < 0; ++i) {
        co_await sleep(1ms);
    }
    EXPECT_EQ(homed_released_on.load(), 0) << "released once, on its home shard";
    EXPECT_EQ(homed_foreign_decrements.load(), 0);
}

} // namespace

TEST(ForeignBuffer, AnOwnerThatStaysHomeIsDroppedAtHomeFromAnyShard) {
    EXPECT_EQ(run_in_shards(2, slices_dropped_on_another_shard_are_dropped_at_home), 0);
}
