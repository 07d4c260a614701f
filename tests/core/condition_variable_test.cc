// condition_variable: signal order, broadcast, predicates, deadlines, abort, breaking.
#include "core/condition_variable.hh"
#include "core/future_util.hh"
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

TEST(condition_variable, signal_wakes_the_oldest_waiter) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  condition_variable cv;
                  std::vector<int> woken;
                  auto a = cv.wait().then([&] { woken.push_back(1); });
                  auto b = cv.wait().then([&] { woken.push_back(2); });
                  EXPECT_EQ(cv.waiters(), 2u);
                  co_await run_queued_tasks();
                  EXPECT_TRUE(woken.empty());
                  cv.signal();
                  co_await std::move(a);
                  co_await run_queued_tasks();
                  EXPECT_EQ(woken, (std::vector<int>{1}));
                  EXPECT_EQ(cv.waiters(), 1u);
                  cv.signal();
                  co_await std::move(b);
                  EXPECT_EQ(woken, (std::vector<int>{1, 2}));
                  EXPECT_FALSE(cv.has_waiters());
              }),
              0);
}

TEST(condition_variable, broadcast_wakes_every_current_waiter) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  condition_variable cv;
                  std::vector<future<>> fs;
                  for (int i = 0; i < 5; ++i) {
                      fs.push_back(cv.wait());
                  }
                  cv.broadcast();
                  EXPECT_EQ(cv.waiters(), 0u);
                  auto late = cv.wait(); // after the broadcast: not woken by it
                  co_await when_all_succeed(std::move(fs));
                  co_await run_queued_tasks();
                  EXPECT_FALSE(late.available());
                  cv.broadcast();
                  co_await std::move(late);
              }),
              0);
}

TEST(condition_variable, a_signal_without_waiters_is_lost) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  condition_variable cv;
                  cv.signal();
                  cv.broadcast();
                  auto f = cv.wait();
                  co_await run_queued_tasks();
                  EXPECT_FALSE(f.available());
                  cv.signal();
                  co_await std::move(f);
              }),
              0);
}

TEST(condition_variable, predicate_wait_sleeps_through_signals_until_it_holds) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  condition_variable cv;
                  int items = 0;
                  int checks = 0;
                  auto f = cv.wait([&] {
                      ++checks;
                      return items >= 2;
                  });
                  EXPECT_EQ(checks, 1);
                  cv.signal(); // spurious: the predicate is still false
                  co_await run_queued_tasks();
                  EXPECT_FALSE(f.available());
                  EXPECT_EQ(checks, 2);
                  EXPECT_EQ(cv.waiters(), 1u);
                  ++items;
                  cv.signal();
                  co_await run_queued_tasks();
                  EXPECT_FALSE(f.available());
                  ++items;
                  cv.signal();
                  co_await std::move(f);
                  EXPECT_EQ(checks, 4);

                  // A true predicate resolves at once without queueing, even once broken.
                  auto ready = cv.wait([] { return true; });
                  EXPECT_TRUE(ready.available());
                  co_await std::move(ready);
                  cv.broken();
                  auto still_ready = cv.wait([] { return true; });
                  EXPECT_TRUE(still_ready.available());
                  co_await std::move(still_ready);
                  EXPECT_EQ(co_await failure_message(cv.wait([] { return false; })),
                            "condition variable broken");
              }),
              0);
}

TEST(condition_variable, a_throwing_predicate_fails_the_wait) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  condition_variable cv;
                  auto at_once = cv.wait([]() -> bool { throw test_error("first check"); });
                  EXPECT_EQ(failure_of(at_once), "first check");
                  bool armed = false;
                  auto later = cv.wait([&]() -> bool {
                      if (armed) {
                          throw test_error("after a wake-up");
                      }
                      return false;
                  });
                  armed = true;
                  cv.signal();
                  EXPECT_EQ(co_await failure_message(std::move(later)), "after a wake-up");
                  EXPECT_FALSE(cv.has_waiters());
              }),
              0);
}

TEST(condition_variable, wait_with_a_deadline_or_duration_times_out) {
    EXPECT_EQ(
        run_in_shard([]() -> future<> {
            condition_variable cv;
            auto start = steady_clock_type::now();
            auto by_deadline = cv.wait(start + 20ms);
            auto by_duration = cv.wait(10ms);
            auto untimed = cv.wait();
            EXPECT_EQ(co_await failure_message(std::move(by_duration)), "condition variable wait timed out");
            EXPECT_GE(steady_clock_type::now() - start, 10ms);
            EXPECT_EQ(co_await failure_message(std::move(by_deadline)), "condition variable wait timed out");
            EXPECT_GE(steady_clock_type::now() - start, 20ms);
            EXPECT_EQ(cv.waiters(), 1u); // the timed-out waiters left the queue
            cv.signal();                 // so the signal reaches the untimed one
            co_await std::move(untimed);
        }),
        0);
}

TEST(condition_variable, a_signal_before_the_deadline_cancels_the_timeout) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  condition_variable cv;
                  auto f = cv.wait(5ms);
                  cv.signal();
                  co_await std::move(f);
                  co_await sleep(15ms); // past the deadline: no timer fires into the variable
                  EXPECT_FALSE(cv.has_waiters());
                  // Waiters in the middle of the queue leave it cleanly too.
                  auto a = cv.wait();
                  auto b = cv.wait(5ms);
                  auto c = cv.wait();
                  EXPECT_EQ(co_await failure_message(std::move(b)), "condition variable wait timed out");
                  cv.broadcast();
                  co_await std::move(a);
                  co_await std::move(c);
              }),
              0);
}

TEST(condition_variable, predicate_wait_with_a_deadline) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  condition_variable cv;
                  bool ready = false;
                  auto start = steady_clock_type::now();
                  auto never = cv.wait(start + 20ms, [&] { return false; });
                  auto in_time = cv.wait(10s, [&] { return ready; });
                  cv.broadcast(); // both re-check and wait again, with their first deadline
                  co_await run_queued_tasks();
                  EXPECT_EQ(cv.waiters(), 2u);
                  EXPECT_EQ(co_await failure_message(std::move(never)), "condition variable wait timed out");
                  EXPECT_GE(steady_clock_type::now() - start, 20ms);
                  ready = true;
                  cv.signal();
                  co_await std::move(in_time);
              }),
              0);
}

TEST(condition_variable, abort_fails_the_waiter_with_the_reason) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  condition_variable cv;
                  abort_source as;
                  auto aborted = cv.wait(as);
                  auto other = cv.wait();
                  auto with_pred = cv.wait(as, [] { return false; });
                  EXPECT_EQ(cv.waiters(), 3u);
                  as.request_abort_ex(test_error("cancelled"));
                  EXPECT_EQ(cv.waiters(), 1u);
                  EXPECT_EQ(co_await failure_message(std::move(aborted)), "cancelled");
                  EXPECT_EQ(co_await failure_message(std::move(with_pred)), "cancelled");
                  cv.signal(); // reaches the waiter that did not take the abort_source
                  co_await std::move(other);

                  auto at_once = cv.wait(as); // already aborted: fails without queueing
                  EXPECT_EQ(failure_of(at_once), "cancelled");
                  EXPECT_FALSE(cv.has_waiters());

                  abort_source later;
                  auto woken = cv.wait(later);
                  cv.signal();
                  co_await std::move(woken);
                  later.request_abort(); // the subscription went with the waiter: nothing happens
              }),
              0);
}

TEST(condition_variable, broken_fails_waiters_and_later_waits) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  condition_variable cv;
                  abort_source as;
                  auto a = cv.wait();
                  auto b = cv.wait(10s);
                  auto c = cv.wait(as);
                  cv.broken(std::make_exception_ptr(test_error("shutting down")));
                  EXPECT_FALSE(cv.has_waiters());
                  EXPECT_EQ(co_await failure_message(std::move(a)), "shutting down");
                  EXPECT_EQ(co_await failure_message(std::move(b)), "shutting down");
                  EXPECT_EQ(co_await failure_message(std::move(c)), "shutting down");
                  auto d = cv.wait();
                  EXPECT_EQ(failure_of(d), "shutting down");
                  auto e = cv.wait(1ms);
                  EXPECT_EQ(failure_of(e), "shutting down");
                  cv.signal(); // harmless
                  as.request_abort();
              }),
              0);
}

TEST(condition_variable, destroying_it_breaks_its_waiters) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto cv = std::make_unique<condition_variable>();
                  auto f = cv->wait(10s);
                  auto g = cv->wait([] { return false; });
                  cv.reset();
                  bool broken = false;
                  try {
                      co_await std::move(f);
                  } catch (const broken_condition_variable&) {
                      broken = true;
                  }
                  EXPECT_TRUE(broken);
                  EXPECT_EQ(co_await failure_message(std::move(g)), "condition variable broken");
              }),
              0);
}

TEST(condition_variable, producer_and_consumer_coroutines) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  condition_variable cv;
                  std::vector<int> box;
                  bool done = false;
                  auto consumer = [](condition_variable& cv, std::vector<int>& box,
                                     bool& done) -> future<int> {
                      int sum = 0;
                      for (;;) {
                          co_await cv.wait([&] { return !box.empty() || done; });
                          if (box.empty()) {
                              co_return sum;
                          }
                          sum += box.back();
                          box.pop_back();
                      }
                  };
                  auto total = consumer(cv, box, done);
                  for (int i = 1; i <= 10; ++i) {
                      box.push_back(i);
                      cv.signal();
                      co_await yield();
                  }
                  done = true;
                  cv.signal();
                  EXPECT_EQ(co_await std::move(total), 55);
              }),
              0);
}
