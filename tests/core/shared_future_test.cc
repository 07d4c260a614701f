// shared_future: many waiters get copies of the value or the exception, per-waiter deadlines,
// copies sharing one result, and a source that outlives every handle.
#include "core/shared_future.hh"
#include "core/timer.hh"
#include "queued_tasks.hh"
#include "support/run.hh"
#include "test_failures.hh"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using namespace std::chrono_literals;
using shoal::testing::failure_message;
using shoal::testing::failure_of;
using shoal::testing::run_in_shard;
using shoal::testing::run_queued_tasks;
using shoal::testing::test_error;

TEST(shared_future, every_waiter_gets_its_own_copy_of_the_value) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<std::vector<int>> p;
                  shared_future<std::vector<int>> sf(p.get_future());
                  EXPECT_TRUE(sf.valid());
                  EXPECT_FALSE(sf.available());
                  auto a = sf.get_future();
                  auto b = sf.get_future();
                  auto copy = sf; // shares the result
                  future<std::vector<int>> c = copy;
                  co_await run_queued_tasks();
                  EXPECT_FALSE(a.available());
                  p.set_value(std::vector<int>{1, 2, 3});
                  auto va = co_await std::move(a);
                  auto vb = co_await std::move(b);
                  auto vc = co_await std::move(c);
                  EXPECT_EQ(va, (std::vector<int>{1, 2, 3}));
                  EXPECT_NE(va.data(), vb.data()); // copies, not one moved-from value
                  EXPECT_EQ(vb, va);
                  EXPECT_EQ(vc, va);
                  EXPECT_TRUE(sf.available());
                  EXPECT_FALSE(sf.failed());
                  auto late = sf.get_future(); // ready at once now
                  EXPECT_TRUE(late.available());
                  EXPECT_EQ(co_await std::move(late), va);
              }),
              0);
}

TEST(shared_future, every_waiter_gets_the_exception) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<int> p;
                  shared_future<int> sf(p.get_future());
                  std::vector<future<int>> waiters;
                  for (int i = 0; i < 3; ++i) {
                      waiters.push_back(sf.get_future());
                  }
                  p.set_exception(test_error("source failed"));
                  for (auto& w : waiters) {
                      auto message = co_await failure_message(std::move(w));
                      EXPECT_EQ(message, "source failed");
                  }
                  EXPECT_TRUE(sf.failed());
                  auto late = sf.get_future();
                  EXPECT_EQ(failure_of(late), "source failed");
                  // Nobody asks any more: the stored failure is not reported as ignored.
              }),
              0);
}

TEST(shared_future, a_waiter_deadline_fails_only_that_waiter) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<> p;
                  shared_future<> sf(p.get_future());
                  auto start = steady_clock_type::now();
                  auto impatient = sf.get_future(10ms);
                  auto patient = sf.get_future(start + 10s);
                  auto plain = sf.get_future();
                  auto message = co_await failure_message(std::move(impatient));
                  EXPECT_EQ(message, "timed out");
                  EXPECT_GE(steady_clock_type::now() - start, 10ms);
                  EXPECT_FALSE(patient.available());
                  p.set_value(); // cancels the patient waiter's timer
                  co_await std::move(patient);
                  co_await std::move(plain);
                  co_await sleep(1ms); // no stale timer fires
              }),
              0);
}

TEST(shared_future, from_a_ready_future) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  shared_future<std::string> sf(make_ready_future<std::string>("here"));
                  EXPECT_TRUE(sf.available());
                  EXPECT_EQ(co_await sf.get_future(), "here");
                  EXPECT_EQ(co_await sf.get_future(1ms), "here");
                  shared_future<int> failed(make_exception_future<int>(test_error("at once")));
                  auto f = failed.get_future();
                  EXPECT_EQ(failure_of(f), "at once");
              }),
              0);
}

TEST(shared_future, the_source_outlives_every_handle) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<int> p;
                  future<int> waiter = make_ready_future<int>(0);
                  {
                      shared_future<int> sf(p.get_future());
                      waiter = sf.get_future();
                  } // the last handle goes while the source is pending
                  p.set_value(7);
                  EXPECT_EQ(co_await std::move(waiter), 7);

                  promise<int> dropped;
                  { shared_future<int> sf(dropped.get_future()); }
                  dropped.set_exception(test_error("nobody listens")); // consumed by the shared state
              }),
              0);
}

TEST(shared_future, a_broken_source_fails_the_waiters) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto p = std::make_unique<promise<int>>();
                  shared_future<int> sf(p->get_future());
                  auto w = sf.get_future(10s);
                  p.reset();
                  auto message = co_await failure_message(std::move(w));
                  EXPECT_EQ(message, "broken promise");
              }),
              0);
}

TEST(shared_future, copies_moves_and_empty_ones) {
    shared_future<int> empty;
    EXPECT_FALSE(empty.valid());
    EXPECT_FALSE(empty.available());
    shared_future<int> sf(make_ready_future<int>(3));
    shared_future<int> moved(std::move(sf));
    EXPECT_FALSE(sf.valid()); // NOLINT: checking the moved-from state
    empty = moved;
    EXPECT_TRUE(empty.available());
    auto f = empty.get_future();
    EXPECT_EQ(f.get(), 3);
}
