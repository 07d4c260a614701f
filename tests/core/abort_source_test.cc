// abort_source: subscriptions (order, once, RAII unsubscription, moves), and the operations that
// honour it: sleep_abortable, semaphore::wait(as, n) and with_timeout(deadline, func(as)).
#include "core/abort_source.hh"
#include "core/future_util.hh"
#include "core/semaphore.hh"
#include "core/timer.hh"
#include "support/patience.hh"
#include "support/run.hh"
#include "test_failures.hh"

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using namespace std::chrono_literals;
using shoal::testing::failure_of;
using shoal::testing::run_in_shard;
using shoal::testing::test_error;

TEST(abort_source, calls_subscribers_once_in_order_with_the_reason) {
    abort_source as;
    std::vector<std::string> calls;
    auto a = as.subscribe([&](const std::exception_ptr&) { calls.push_back("a"); });
    auto b = as.subscribe([&](const std::exception_ptr& ex) {
        try {
            std::rethrow_exception(ex);
        } catch (const test_error& e) {
            calls.push_back(std::string("b:") + e.what());
        }
    });
    EXPECT_TRUE(a && b);
    EXPECT_FALSE(as.abort_requested());
    as.request_abort_ex(test_error("why"));
    as.request_abort(); // only the first request counts
    EXPECT_EQ(calls, (std::vector<std::string>{"a", "b:why"}));
    EXPECT_TRUE(as.abort_requested());
    EXPECT_FALSE(a);
    EXPECT_THROW(as.check(), test_error);
    // Subscribing after the abort gives an empty subscription and no call.
    auto late = as.subscribe([&](const std::exception_ptr&) { calls.push_back("late"); });
    EXPECT_FALSE(late);
    EXPECT_EQ(calls.size(), 2u);
}

TEST(abort_source, dropped_and_moved_subscriptions) {
    abort_source as;
    std::vector<int> calls;
    abort_source::subscription kept;
    {
        auto dropped = as.subscribe([&](const std::exception_ptr&) { calls.push_back(1); });
        auto moved = as.subscribe([&](const std::exception_ptr&) { calls.push_back(2); });
        kept = std::move(moved);
        EXPECT_FALSE(moved);
    }
    auto third = as.subscribe([&](const std::exception_ptr&) { calls.push_back(3); });
    as.request_abort();
    EXPECT_EQ(calls, (std::vector<int>{2, 3}));
    EXPECT_THROW(as.check(), abort_requested_exception);
}

TEST(abort_source, sleep_abortable_is_cut_short) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  abort_source as;
                  // Far longer than the abort takes: only the abort can end it in time.
                  auto slept = sleep_abortable(shoal::testing::patience, as);
                  timer<> t([&as] { as.request_abort(); });
                  t.arm(1ms);
                  try {
                      co_await std::move(slept);
                      ADD_FAILURE() << "the sleep was not aborted";
                  } catch (const abort_requested_exception&) {
                  }
                  // An uninterrupted one ends normally; an aborted source fails new sleeps at once.
                  abort_source quiet;
                  co_await sleep_abortable(1ms, quiet);
                  auto f = sleep_abortable(10s, as);
                  EXPECT_TRUE(f.failed());
                  f.ignore_ready_future();
              }),
              0);
}

TEST(abort_source, semaphore_wait_leaves_the_queue_on_abort) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  semaphore sem(0);
                  abort_source as;
                  auto first = sem.wait(as, 1);
                  auto second = sem.wait(1); // behind the aborted one
                  EXPECT_EQ(sem.waiters(), 2u);
                  as.request_abort_ex(test_error("cancelled"));
                  EXPECT_EQ(sem.waiters(), 1u);
                  EXPECT_EQ(failure_of(first), "cancelled");
                  sem.signal(1); // goes to the remaining waiter
                  co_await std::move(second);
                  EXPECT_EQ(sem.available_units(), 0u);
                  // Granted before the abort: the abort changes nothing.
                  abort_source later;
                  sem.signal(1);
                  co_await sem.wait(later, 1);
                  later.request_abort();
                  auto refused = sem.wait(later, 1);
                  EXPECT_TRUE(refused.failed());
                  refused.ignore_ready_future();
              }),
              0);
}

TEST(abort_source, with_timeout_cancels_an_operation_that_takes_an_abort_source) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  bool reached_the_end = false;
                  auto op = [&reached_the_end](abort_source& as) {
                      return sleep_abortable(shoal::testing::patience, as).then([&reached_the_end] {
                          reached_the_end = true;
                      });
                  };
                  auto f = with_timeout(steady_clock_type::now() + 5ms, op);
                  try {
                      co_await std::move(f);
                      ADD_FAILURE() << "no timeout";
                  } catch (const timed_out_error&) {
                  }
                  EXPECT_FALSE(reached_the_end);
                  // Finishing in time: the value comes through and the deadline timer is gone.
                  int v = co_await with_timeout(
                      steady_clock_type::now() + shoal::testing::patience,
                      [](abort_source& as) { return sleep_abortable(1ms, as).then([] { return 7; }); });
                  EXPECT_EQ(v, 7);
              }),
              0);
}
