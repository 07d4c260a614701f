// max_concurrent_for_each: the bound on calls in flight, order, failures stopping the walk.
#include "core/max_concurrent_for_each.hh"
#include "core/timer.hh"
#include "support/run.hh"
#include "test_failures.hh"

#include <algorithm>
#include <chrono>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using namespace std::chrono_literals;
using shoal::testing::failure_message;
using shoal::testing::failure_of;
using shoal::testing::run_in_shard;
using shoal::testing::test_error;

TEST(max_concurrent_for_each, keeps_at_most_max_calls_in_flight) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  std::vector<int> items(40);
                  for (int i = 0; i < 40; ++i) {
                      items[i] = i;
                  }
                  int in_flight = 0;
                  int most = 0;
                  std::vector<int> started;
                  co_await max_concurrent_for_each(items, 4, [&](int i) {
                      started.push_back(i);
                      most = std::max(most, ++in_flight);
                      return sleep(std::chrono::microseconds(100 + 50 * (i % 3))).then([&] { --in_flight; });
                  });
                  EXPECT_EQ(in_flight, 0);
                  EXPECT_EQ(most, 4);
                  EXPECT_EQ(started, items); // started in order
              }),
              0);
}

TEST(max_concurrent_for_each, one_at_a_time_and_ready_calls) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  std::vector<int> items{1, 2, 3, 4, 5};
                  std::vector<int> done;
                  co_await max_concurrent_for_each(
                      items, 1, [&](int i) { return sleep(100us).then([&done, i] { done.push_back(i); }); });
                  EXPECT_EQ(done, items);
                  int sum = 0;
                  co_await max_concurrent_for_each(items, 2, [&](int i) { sum += i; }); // void: ready
                  EXPECT_EQ(sum, 15);
                  std::vector<int> none;
                  co_await max_concurrent_for_each(none, 3, [](int) { return make_ready_future<>(); });
              }),
              0);
}

TEST(max_concurrent_for_each, a_failure_stops_the_walk_and_waits_for_the_calls_in_flight) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  std::vector<int> items(20);
                  for (int i = 0; i < 20; ++i) {
                      items[i] = i;
                  }
                  int started = 0;
                  int finished = 0;
                  auto f = max_concurrent_for_each(items, 3, [&](int i) -> future<> {
                      ++started;
                      co_await sleep(i == 4 ? 100us : 2ms);
                      ++finished;
                      if (i == 4 || i == 5) {
                          throw test_error(i == 4 ? "first failure" : "second failure");
                      }
                  });
                  auto message = co_await failure_message(std::move(f));
                  EXPECT_EQ(message, "first failure");
                  EXPECT_EQ(finished, started); // nothing left running
                  EXPECT_LT(started, 20);       // the walk stopped
                  EXPECT_GE(started, 5);

                  auto sync = max_concurrent_for_each(items, 2, [&](int i) {
                      if (i == 1) {
                          throw test_error("thrown by the call");
                      }
                  });
                  message = co_await failure_message(std::move(sync));
                  EXPECT_EQ(message, "thrown by the call");
              }),
              0);
}
