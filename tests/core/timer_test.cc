// Timers and clocks: sleep, one-shot and periodic timers, cancel and rearm, expiry order, and
// the low-resolution clock the reactor refreshes. Assertions on time are lower bounds only.
#include "core/future_util.hh"
#include "core/timer.hh"
#include "support/run.hh"

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using namespace std::chrono_literals;
using shoal::testing::run_in_shard;

TEST(sleep, resolves_after_the_duration) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto start = steady_clock_type::now();
                  auto f = sleep(25ms);
                  EXPECT_FALSE(f.available());
                  co_await std::move(f);
                  EXPECT_GE(steady_clock_type::now() - start, 25ms);
                  auto lstart = lowres_clock::now();
                  co_await sleep_lowres(10ms);
                  EXPECT_GE(lowres_clock::now() - lstart, 10ms);
                  // A zero or negative duration still goes through the timer queue.
                  auto z = sleep(0ms);
                  EXPECT_FALSE(z.available());
                  co_await std::move(z);
                  co_await sleep(-5ms);
              }),
              0);
}

TEST(sleep, concurrent_sleeps_finish_in_deadline_order) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  std::vector<int> order;
                  std::vector<future<>> fs;
                  for (int ms : {30, 10, 20}) {
                      fs.push_back(
                          sleep(std::chrono::milliseconds(ms)).then([&order, ms] { order.push_back(ms); }));
                  }
                  co_await when_all_succeed(std::move(fs));
                  EXPECT_EQ(order, (std::vector<int>{10, 20, 30}));
              }),
              0);
}

TEST(timer, fires_once_after_its_deadline) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  int fired = 0;
                  steady_clock_type::time_point fired_at;
                  timer<> t([&] {
                      ++fired;
                      fired_at = steady_clock_type::now();
                  });
                  auto fired_before = local_reactor().stats().timers_fired;
                  auto deadline = steady_clock_type::now() + 15ms;
                  t.arm(deadline);
                  EXPECT_TRUE(t.armed());
                  co_await sleep(40ms);
                  EXPECT_EQ(fired, 1);
                  EXPECT_GE(fired_at, deadline);
                  EXPECT_FALSE(t.armed());
                  EXPECT_GE(local_reactor().stats().timers_fired, fired_before + 2); // t and the sleep
              }),
              0);
}

TEST(timer, cancel_prevents_firing) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  int fired = 0;
                  timer<> t([&] { ++fired; });
                  EXPECT_FALSE(t.cancel());
                  t.arm(5ms);
                  EXPECT_TRUE(t.cancel());
                  EXPECT_FALSE(t.armed());
                  co_await sleep(20ms);
                  EXPECT_EQ(fired, 0);
                  // rearm replaces the deadline.
                  t.arm(1h);
                  t.rearm(steady_clock_type::now() + 1ms);
                  co_await sleep(15ms);
                  EXPECT_EQ(fired, 1);
                  // Destroying an armed timer cancels it.
                  {
                      timer<> dropped([&] { ++fired; });
                      dropped.arm(1ms);
                  }
                  co_await sleep(10ms);
                  EXPECT_EQ(fired, 1);
              }),
              0);
}

TEST(timer, periodic_until_cancelled) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  std::vector<steady_clock_type::time_point> at;
                  promise<> done;
                  timer<> t;
                  t.set_callback([&] {
                      at.push_back(steady_clock_type::now());
                      if (at.size() == 4) {
                          t.cancel(); // from inside its own callback
                          done.set_value();
                      }
                  });
                  auto start = steady_clock_type::now();
                  t.arm_periodic(5ms);
                  co_await done.get_future();
                  co_await sleep(20ms);
                  CO_ASSERT_TRUE(at.size() == 4u);
                  for (size_t i = 0; i < at.size(); ++i) {
                      // The k-th expiry is scheduled k periods after arming.
                      EXPECT_GE(at[i] - start, std::chrono::milliseconds(5 * (i + 1)));
                  }
              }),
              0);
}

TEST(timer, many_timers_fire_in_deadline_order) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  constexpr int n = 200;
                  std::vector<int> fired;
                  std::vector<std::unique_ptr<timer<>>> timers;
                  std::vector<int> delay(n);
                  std::mt19937 rng(12345);
                  auto base = steady_clock_type::now() + 5ms;
                  for (int i = 0; i < n; ++i) {
                      delay[i] = int(rng() % 3000); // microseconds
                      auto t = std::make_unique<timer<>>([&fired, i] { fired.push_back(i); });
                      t->arm(base + std::chrono::microseconds(delay[i]));
                      timers.push_back(std::move(t));
                  }
                  // Cancel every third: removal from the middle of the heap.
                  for (int i = 0; i < n; i += 3) {
                      EXPECT_TRUE(timers[i]->cancel());
                  }
                  co_await sleep(30ms);
                  std::vector<int> expected;
                  for (int i = 0; i < n; ++i) {
                      if (i % 3 != 0) {
                          expected.push_back(i);
                      }
                  }
                  std::stable_sort(expected.begin(), expected.end(),
                                   [&](int a, int b) { return delay[a] < delay[b]; });
                  CO_ASSERT_TRUE(fired.size() == expected.size());
                  for (size_t k = 1; k < fired.size(); ++k) {
                      EXPECT_LE(delay[fired[k - 1]], delay[fired[k]])
                          << "timer " << fired[k] << " fired too early";
                  }
                  std::sort(fired.begin(), fired.end());
                  std::sort(expected.begin(), expected.end());
                  EXPECT_EQ(fired, expected);
              }),
              0);
}

TEST(timer, lowres_timer) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  bool fired = false;
                  lowres_clock::time_point fired_at;
                  timer<lowres_clock> t([&] {
                      fired = true;
                      fired_at = lowres_clock::now();
                  });
                  auto deadline = lowres_clock::now() + 10ms;
                  t.arm(deadline);
                  co_await sleep(30ms);
                  EXPECT_TRUE(fired);
                  EXPECT_GE(fired_at, deadline);
              }),
              0);
}

TEST(lowres_clock, is_refreshed_by_the_reactor_not_by_reads) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto a = lowres_clock::now();
                  auto steady_before = steady_clock_type::now();
                  while (steady_clock_type::now() - steady_before < 2ms) {
                  }
                  // Same task, no reactor loop in between: the cached value did not move.
                  EXPECT_EQ(lowres_clock::now(), a);
                  co_await sleep(5ms);
                  auto b = lowres_clock::now();
                  EXPECT_GE(b - a, 5ms);
                  // Shares its epoch with the steady clock.
                  EXPECT_LE(lowres_clock::to_steady(b), steady_clock_type::now());
                  EXPECT_GE(lowres_clock::to_steady(b), steady_before + 5ms);
              }),
              0);
}

TEST(lowres_clock, reads_the_steady_clock_off_a_shard) {
    auto before = steady_clock_type::now();
    auto now = lowres_clock::to_steady(lowres_clock::now());
    EXPECT_GE(now, before);
    EXPECT_LE(now, steady_clock_type::now());
    EXPECT_EQ(lowres_clock::from_steady(before).time_since_epoch(), before.time_since_epoch());
}
