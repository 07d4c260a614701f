// core/alien: an engine on background threads, driven from threads outside it.

#include "core/alien.hh"
#include "core/timer.hh"
#include "support/patience.hh"
#include "support/run.hh"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace shoal;
using namespace std::chrono_literals;

namespace {

smp_options two_unpinned_shards() {
    smp_options opts;
    opts.smp = 2;
    opts.pin = false;
    return opts;
}

/// Waits for `f` at most `patience` (a hang fails the test instead of blocking it).
template <typename T>
T wait(std::future<T>& f) {
    if (f.wait_for(shoal::testing::patience) != std::future_status::ready) {
        throw std::runtime_error("no answer from the engine");
    }
    return f.get();
}

} // namespace

TEST(alien, work_runs_on_the_shard_it_was_given_to) {
    alien::engine e(two_unpinned_shards());
    ASSERT_EQ(e.shards(), 2u);
    for (unsigned shard = 0; shard < 2; ++shard) {
        auto f = e.submit(shard, [] { return this_shard_id(); });
        EXPECT_EQ(wait(f), shard);
    }
}

TEST(alien, a_returned_future_is_waited_for_and_an_exception_reaches_the_caller) {
    alien::engine e(two_unpinned_shards());
    auto slow = e.submit(1, []() -> future<int> {
        co_await sleep(5ms);
        co_return 42;
    });
    EXPECT_EQ(wait(slow), 42);
    auto failing = e.submit(0, []() -> int { throw std::invalid_argument("bad input"); });
    EXPECT_THROW(wait(failing), std::invalid_argument);
    auto void_work = e.submit(1, [] {});
    EXPECT_NO_THROW(wait(void_work));
}

TEST(alien, a_sleeping_shard_wakes_for_work_from_outside) {
    alien::engine e(two_unpinned_shards());
    // Give both shards time to go idle and sleep in io_uring, several times over.
    for (int round = 0; round < 5; ++round) {
        std::this_thread::sleep_for(20ms);
        auto f = e.submit(round % 2, [round] { return round; });
        EXPECT_EQ(wait(f), round);
    }
}

TEST(alien, many_threads_hand_over_work_concurrently_and_none_is_lost) {
    alien::engine e(two_unpinned_shards());
    constexpr int threads = 4;
    constexpr int per_thread = 2000;
    // Each shard counts what it ran in a shard-local counter: no atomics on the shard side.
    std::vector<std::thread> callers;
    std::vector<long> sums(threads, 0);
    for (int t = 0; t < threads; ++t) {
        callers.emplace_back([&e, &sums, t] {
            std::vector<std::future<int>> answers;
            answers.reserve(per_thread);
            for (int i = 0; i < per_thread; ++i) {
                answers.push_back(e.submit(unsigned(i % 2), [i] { return i; }));
            }
            for (auto& a : answers) {
                sums[t] += wait(a);
            }
        });
    }
    for (auto& c : callers) {
        c.join();
    }
    for (int t = 0; t < threads; ++t) {
        EXPECT_EQ(sums[t], long(per_thread) * (per_thread - 1) / 2) << "thread " << t;
    }
}

TEST(alien, post_runs_work_without_an_answer) {
    alien::engine e(two_unpinned_shards());
    std::promise<unsigned> ran_on;
    ASSERT_TRUE(e.post(1, [&ran_on] { ran_on.set_value(this_shard_id()); }));
    auto f = ran_on.get_future();
    EXPECT_EQ(wait(f), 1u);
}

TEST(alien, work_after_stop_and_for_a_missing_shard_is_refused_with_a_clear_error) {
    alien::engine e(two_unpinned_shards());
    auto missing = e.submit(7, [] { return 1; });
    EXPECT_THROW(wait(missing), std::out_of_range);
    EXPECT_FALSE(e.post(7, [] {}));
    e.stop();
    EXPECT_FALSE(e.running());
    auto late = e.submit(0, [] { return 1; });
    EXPECT_THROW(wait(late), alien::engine_stopped);
    EXPECT_FALSE(e.post(0, [] {}));
    e.stop(); // idempotent
}

TEST(alien, work_queued_before_stop_still_runs) {
    alien::engine e(two_unpinned_shards());
    std::vector<std::future<int>> answers;
    for (int i = 0; i < 100; ++i) {
        answers.push_back(e.submit(unsigned(i % 2), [i]() -> future<int> {
            co_await sleep(1ms);
            co_return i;
        }));
    }
    e.stop();
    for (int i = 0; i < 100; ++i) {
        EXPECT_EQ(wait(answers[i]), i);
    }
}

TEST(alien, an_engine_can_start_again_after_the_previous_one_stopped) {
    for (int round = 0; round < 3; ++round) {
        alien::engine e(two_unpinned_shards());
        auto f = e.submit(1, [] { return shard_count(); });
        EXPECT_EQ(wait(f), 2u);
    }
}

TEST(alien, a_second_engine_in_the_process_is_refused) {
    alien::engine e(two_unpinned_shards());
    EXPECT_THROW(alien::engine second{two_unpinned_shards()}, std::logic_error);
    auto f = e.submit(0, [] { return 5; });
    EXPECT_EQ(wait(f), 5);
}
