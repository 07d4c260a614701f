// when_any: the first future wins; the others' results, failures included, are consumed.
#include "core/future_util.hh"
#include "core/when_any.hh"
#include "queued_tasks.hh"
#include "support/run.hh"
#include "test_failures.hh"

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using shoal::testing::failure_of;
using shoal::testing::run_in_shard;
using shoal::testing::run_queued_tasks;
using shoal::testing::test_error;

TEST(when_any, the_first_to_resolve_wins_and_the_losers_failures_are_consumed) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  std::vector<promise<int>> ps(3);
                  std::vector<future<int>> fs;
                  for (auto& p : ps) {
                      fs.push_back(p.get_future());
                  }
                  auto any = when_any(std::move(fs));
                  co_await run_queued_tasks();
                  EXPECT_FALSE(any.available());
                  ps[1].set_value(11);
                  auto r = co_await std::move(any);
                  EXPECT_EQ(r.index, 1u);
                  EXPECT_EQ(r.first.get(), 11);
                  // The losers fail later: the run would fail if these were reported as dropped.
                  ps[0].set_exception(test_error("late failure"));
                  ps[2].set_value(33);
                  co_await run_queued_tasks();
              }),
              0);
}

TEST(when_any, a_failed_first_future_is_handed_over) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<> slow;
                  promise<> fails;
                  auto any = when_any(slow.get_future(), fails.get_future());
                  fails.set_exception(test_error("first and failed"));
                  auto r = co_await std::move(any);
                  EXPECT_EQ(r.index, 1u);
                  EXPECT_EQ(failure_of(r.first), "first and failed");
                  slow.set_value();
              }),
              0);
}

TEST(when_any, among_ready_futures_the_first_in_order_wins) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<std::string> pending;
                  std::vector<future<std::string>> fs;
                  fs.push_back(pending.get_future());
                  fs.push_back(make_exception_future<std::string>(test_error("ready failure")));
                  fs.push_back(make_ready_future<std::string>("ready value"));
                  auto any = when_any(std::move(fs));
                  EXPECT_TRUE(any.available());
                  auto r = co_await std::move(any);
                  EXPECT_EQ(r.index, 1u);
                  EXPECT_EQ(failure_of(r.first), "ready failure");
                  pending.set_exception(test_error("later")); // consumed
                  co_await run_queued_tasks();
              }),
              0);
}

TEST(when_any, no_future_is_an_error) {
    auto f = when_any(std::vector<future<int>>{});
    EXPECT_EQ(shoal::testing::failure_of(f), "when_any of no future");
}

TEST(when_any, the_promises_going_away_resolve_it) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto a = std::make_unique<promise<int>>();
                  auto b = std::make_unique<promise<int>>();
                  auto any = when_any(a->get_future(), b->get_future());
                  a.reset(); // broken promise: the first result
                  b.reset(); // a loser's broken promise, consumed
                  auto r = co_await std::move(any);
                  EXPECT_EQ(r.index, 0u);
                  EXPECT_EQ(failure_of(r.first), "broken promise");
              }),
              0);
}
