// C++20 coroutines returning future<T>: eager start, co_await of ready and pending futures
// (a timer, a file read), exception propagation, and foreign coroutine types awaiting futures.
#include "core/file.hh"
#include "core/future.hh"
#include "core/future_util.hh"
#include "core/timer.hh"
#include "support/run.hh"
#include "support/temp_file.hh"
#include "test_failures.hh"

#include <chrono>
#include <coroutine>
#include <cstdlib>
#include <fcntl.h>
#include <memory>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using shoal::testing::test_error;
using namespace std::chrono_literals;
using shoal::testing::run_in_shard;
using shoal::testing::temp_file;

namespace {

future<int> add_ready(int a, int b) {
    int x = co_await make_ready_future<int>(a);
    co_return x + b;
}

future<> throws_at_once() {
    throw test_error("at once");
    co_return;
}

future<int> throws_after_suspension() {
    co_await yield();
    throw test_error("after suspension");
}

future<std::unique_ptr<std::string>> move_only(std::string s) {
    co_await yield();
    co_return std::make_unique<std::string>(std::move(s));
}

future<int> depth(int n) {
    if (n == 0) {
        co_await yield();
        co_return 0;
    }
    co_return 1 + co_await depth(n - 1);
}

/// A coroutine type that is not shoal's: its promise is not a task, so awaiting a future goes
/// through the awaiter's own resume task.
struct foreign_task {
    struct promise_type {
        foreign_task get_return_object() noexcept { return {}; }
        std::suspend_never initial_suspend() noexcept { return {}; }
        std::suspend_never final_suspend() noexcept { return {}; }
        void return_void() noexcept {}
        void unhandled_exception() noexcept { std::abort(); }
    };
};

foreign_task foreign_await(future<int> f, int* out, promise<>* done) {
    *out = co_await std::move(f);
    done->set_value();
}

} // namespace

TEST(coroutine, completes_synchronously_without_suspending) {
    // No reactor needed: nothing suspends.
    auto f = add_ready(2, 3);
    ASSERT_TRUE(f.available());
    EXPECT_EQ(f.get(), 5);
}

TEST(coroutine, exception_before_first_suspension_is_in_the_future) {
    auto f = throws_at_once();
    ASSERT_TRUE(f.available());
    EXPECT_THROW(f.get(), test_error);
}

namespace {
/// A shard without time-based preemption: a ready `co_await` then never yields, whatever the
/// load of the machine (with a time quota, a slow run may find it used up and queue the
/// coroutine behind the caller, which is right but not what this test is about).
reactor_config no_time_quota() {
    reactor_config cfg;
    cfg.task_quota_time = std::chrono::microseconds(0);
    return cfg;
}
} // namespace

TEST(coroutine, starts_eagerly_and_runs_until_first_pending_await) {
    EXPECT_EQ(run_in_shard(
                  []() -> future<> {
                      std::vector<int> order;
                      auto body = [&order]() -> future<> {
                          order.push_back(1);
                          co_await make_ready_future<>(); // ready: no suspension
                          order.push_back(2);
                          co_await yield(); // pending: returns to the caller
                          order.push_back(4);
                      };
                      auto f = body();
                      order.push_back(3);
                      EXPECT_FALSE(f.available());
                      co_await std::move(f);
                      EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4}));
                  },
                  no_time_quota()),
              0);
}

TEST(coroutine, awaits_a_timer) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto start = steady_clock_type::now();
                  auto sleeper = [start]() -> future<steady_clock_type::duration> {
                      co_await sleep(20ms);
                      co_return steady_clock_type::now() - start;
                  };
                  auto f = sleeper();
                  EXPECT_FALSE(f.available());
                  auto waited = co_await std::move(f);
                  EXPECT_GE(waited, 20ms);
              }),
              0);
}

TEST(coroutine, awaits_a_file_read) {
    temp_file tf("hello from io_uring", "shoal-coro");
    EXPECT_EQ(run_in_shard([&tf]() -> future<> {
                  auto f = co_await file::open(tf.path(), O_RDONLY);
                  char buf[64] = {};
                  auto pending = f.read(0, buf, sizeof(buf));
                  EXPECT_FALSE(pending.available()); // completes through the ring
                  size_t n = co_await std::move(pending);
                  EXPECT_EQ(std::string(buf, n), "hello from io_uring");
                  co_await f.close();
              }),
              0);
}

TEST(coroutine, exceptions_propagate_through_awaits) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  bool caught = false;
                  try {
                      co_await throws_after_suspension();
                  } catch (const test_error& e) {
                      caught = std::string(e.what()) == "after suspension";
                  }
                  EXPECT_TRUE(caught);

                  auto outer = []() -> future<int> {
                      int v = co_await throws_after_suspension(); // not caught here
                      co_return v + 1;
                  };
                  auto f = outer();
                  auto r = co_await std::move(f).then_wrapped(
                      [](future<int> r) { return r.get_exception() != nullptr; });
                  EXPECT_TRUE(r);

                  caught = false;
                  try {
                      co_await make_exception_future<>(test_error("ready exception"));
                  } catch (const test_error&) {
                      caught = true;
                  }
                  EXPECT_TRUE(caught);
              }),
              0);
}

TEST(coroutine, exception_from_a_pending_promise) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<int> p;
                  auto waiter = [](future<int> f) -> future<std::string> {
                      try {
                          co_await std::move(f);
                      } catch (const test_error& e) {
                          co_return std::string("caught ") + e.what();
                      }
                      co_return "no exception";
                  };
                  auto f = waiter(p.get_future());
                  co_await yield();
                  p.set_exception(test_error("x"));
                  EXPECT_EQ(co_await std::move(f), "caught x");

                  auto broken = waiter([] {
                      promise<int> dropped;
                      return dropped.get_future();
                  }());
                  bool is_broken = false;
                  try {
                      co_await std::move(broken);
                  } catch (const broken_promise&) {
                      is_broken = true;
                  }
                  EXPECT_TRUE(is_broken);
              }),
              0);
}

TEST(coroutine, move_only_results_and_nesting) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto p = co_await move_only("owned");
                  EXPECT_EQ(*p, "owned");
                  EXPECT_EQ(co_await depth(50), 50);
              }),
              0);
}

TEST(coroutine, many_suspended_coroutines_resume_in_resolution_order) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  std::vector<int> order;
                  std::vector<promise<>> ps(5);
                  std::vector<future<>> fs;
                  for (int i = 0; i < 5; ++i) {
                      fs.push_back([](future<> f, std::vector<int>& order, int i) -> future<> {
                          co_await std::move(f);
                          order.push_back(i);
                      }(ps[i].get_future(), order, i));
                  }
                  for (int i : {3, 1, 4, 0, 2}) {
                      ps[i].set_value();
                  }
                  co_await when_all(std::move(fs));
                  EXPECT_EQ(order, (std::vector<int>{3, 1, 4, 0, 2}));
              }),
              0);
}

TEST(coroutine, mixes_with_then_chains) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto f =
                      add_ready(1, 1).then([](int x) { return depth(x); }).then([](int d) { return d * 10; });
                  EXPECT_EQ(co_await std::move(f), 20);
              }),
              0);
}

TEST(coroutine, foreign_coroutine_can_await_a_future) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<int> p;
                  promise<> done;
                  auto finished = done.get_future();
                  int out = 0;
                  foreign_await(p.get_future(), &out, &done);
                  EXPECT_EQ(out, 0);
                  co_await yield();
                  p.set_value(99);
                  co_await std::move(finished);
                  EXPECT_EQ(out, 99);
              }),
              0);
}
