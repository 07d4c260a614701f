// foreign_ptr: an object made on one shard, used and dropped on another, is destroyed on its
// home shard; on its home shard it is destroyed at once; release() hands the pointer over.
#include "core/foreign_ptr.hh"
#include "core/future_util.hh"
#include "core/timer.hh"
#include "support/patience.hh"
#include "support/run.hh"

#include <atomic>
#include <chrono>
#include <memory>

#include <gtest/gtest.h>

using namespace shoal;
using namespace std::chrono_literals;
using shoal::testing::run_in_shards;

namespace {

/// Records the shard that destroys it.
struct homed {
    int value;
    std::atomic<int>* destroyed_on;
    ~homed() { destroyed_on->store(int(this_shard_id())); }
};

/// Waits (bounded) until `flag` leaves -1.
future<> wait_until_set(std::atomic<int>& flag) {
    auto deadline = steady_clock_type::now() + shoal::testing::patience;
    while (flag.load() == -1 && steady_clock_type::now() < deadline) {
        co_await sleep(100us);
    }
}

} // namespace

TEST(foreign_ptr, dropped_elsewhere_it_is_destroyed_at_home) {
    static std::atomic<int> destroyed_on{-1};
    destroyed_on = -1;
    EXPECT_EQ(run_in_shards(2,
                            []() -> future<> {
                                auto p = co_await submit_to(1, [] {
                                    return make_foreign(std::make_unique<homed>(42, &destroyed_on));
                                });
                                EXPECT_EQ(p.get_owner_shard(), 1u);
                                EXPECT_EQ(p->value, 42); // usable here while shard 1 leaves it alone
                                EXPECT_EQ((*p).value, 42);
                                p = {}; // dropped on shard 0
                                co_await wait_until_set(destroyed_on);
                                EXPECT_EQ(destroyed_on.load(), 1);
                            }),
              0);
}

TEST(foreign_ptr, dropped_at_home_it_is_destroyed_at_once) {
    static std::atomic<int> destroyed_on{-1};
    destroyed_on = -1;
    EXPECT_EQ(run_in_shards(2,
                            []() -> future<> {
                                // Made on shard 1, sent to shard 0 and back, dropped on shard 1.
                                auto p = co_await submit_to(1, [] {
                                    return make_foreign(std::make_unique<homed>(1, &destroyed_on));
                                });
                                // Named, not a temporary inside the co_await: g++ 12 destroys
                                // such temporaries' captures twice (see docs/core.md).
                                auto drop_at_home = [p = std::move(p)]() mutable {
                                    p.reset();
                                    return destroyed_on.load();
                                };
                                int seen_on_1 = co_await submit_to(1, std::move(drop_at_home));
                                EXPECT_EQ(seen_on_1, 1); // synchronous on its home shard
                                EXPECT_FALSE(p);
                            }),
              0);
}

TEST(foreign_ptr, release_hands_the_pointer_over) {
    static std::atomic<int> destroyed_on{-1};
    destroyed_on = -1;
    EXPECT_EQ(run_in_shards(2,
                            []() -> future<> {
                                auto p = co_await submit_to(1, [] {
                                    return make_foreign(std::make_unique<homed>(5, &destroyed_on));
                                });
                                std::unique_ptr<homed> raw = p.release();
                                EXPECT_FALSE(p);
                                p = {}; // nothing to free any more
                                EXPECT_EQ(destroyed_on.load(), -1);
                                auto free_at_home = [raw = std::move(raw)]() mutable { raw.reset(); };
                                co_await submit_to(1, std::move(free_at_home));
                                EXPECT_EQ(destroyed_on.load(), 1);
                            }),
              0);
}
