// semaphore: units, FIFO fairness, timeouts, breaking, RAII units and with_semaphore.
#include "core/future_util.hh"
#include "core/semaphore.hh"
#include "core/timer.hh"
#include "support/run.hh"
#include "test_failures.hh"

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using shoal::testing::failure_of;
using namespace std::chrono_literals;
using shoal::testing::run_in_shard;

namespace {

/// Lets the reactor run the tasks queued so far (and a few rounds more).
future<> settle(int rounds = 3) {
    for (int i = 0; i < rounds; ++i) {
        co_await yield();
    }
}

} // namespace

TEST(semaphore, takes_and_returns_units) {
    semaphore s(3);
    EXPECT_EQ(s.available_units(), 3u);
    auto a = s.wait(2);
    EXPECT_TRUE(a.available());
    EXPECT_EQ(s.available_units(), 1u);
    EXPECT_TRUE(s.try_wait(1));
    EXPECT_FALSE(s.try_wait(1));
    s.signal(3);
    EXPECT_EQ(s.available_units(), 3u);
    s.consume(5);
    EXPECT_EQ(s.available_units(), 0u);
}

TEST(semaphore, waiters_are_served_in_order) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  semaphore s(2);
                  std::vector<int> order;
                  auto big = s.wait(3).then([&] { order.push_back(3); });
                  auto small = s.wait(1).then([&] { order.push_back(1); }); // waits behind big
                  EXPECT_EQ(s.waiters(), 2u);
                  EXPECT_FALSE(s.try_wait(1)); // somebody waits: no overtaking
                  co_await settle();
                  EXPECT_TRUE(order.empty());
                  s.signal(1); // 3 units: big goes, small still waits
                  co_await std::move(big);
                  EXPECT_EQ(order, (std::vector<int>{3}));
                  EXPECT_EQ(s.waiters(), 1u);
                  s.signal(1);
                  co_await std::move(small);
                  EXPECT_EQ(order, (std::vector<int>{3, 1}));
                  EXPECT_EQ(s.available_units(), 0u);
              }),
              0);
}

TEST(semaphore, wait_with_timeout_fails_after_the_deadline) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  semaphore s(0);
                  auto start = steady_clock_type::now();
                  auto f = s.wait(start + 20ms, 1);
                  EXPECT_FALSE(f.available());
                  bool timed_out = false;
                  try {
                      co_await std::move(f);
                  } catch (const semaphore_timed_out&) {
                      timed_out = true;
                  }
                  EXPECT_TRUE(timed_out);
                  EXPECT_GE(steady_clock_type::now() - start, 20ms);
                  EXPECT_EQ(s.waiters(), 0u);
                  s.signal(1);
                  EXPECT_EQ(s.available_units(), 1u); // the timed-out waiter took nothing
              }),
              0);
}

TEST(semaphore, timed_out_head_lets_the_next_waiter_through) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  semaphore s(1);
                  auto head = s.wait(steady_clock_type::now() + 10ms, 5); // can never be served
                  auto next = s.wait(1);                                  // fits, but queued behind
                  co_await settle();
                  EXPECT_FALSE(next.available());
                  auto r = co_await std::move(head).then_wrapped([](future<> f) { return failure_of(f); });
                  EXPECT_EQ(r, "semaphore wait timed out");
                  co_await std::move(next);
                  EXPECT_EQ(s.available_units(), 0u);
              }),
              0);
}

TEST(semaphore, granted_before_the_deadline_cancels_the_timeout) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  semaphore s(0);
                  auto f = s.wait(steady_clock_type::now() + 5ms, 2);
                  s.signal(2);
                  co_await std::move(f);
                  co_await sleep(15ms); // past the deadline: nothing fires into the semaphore
                  EXPECT_EQ(s.available_units(), 0u);
                  EXPECT_EQ(s.waiters(), 0u);
                  // Several timed waiters, some served, some timing out.
                  std::vector<future<>> fs;
                  for (int i = 0; i < 6; ++i) {
                      fs.push_back(s.wait(steady_clock_type::now() + std::chrono::milliseconds(5 + i), 1));
                  }
                  s.signal(3);
                  auto rs = co_await when_all(std::move(fs));
                  int ok = 0;
                  int timed_out = 0;
                  for (auto& r : rs) {
                      if (r.failed()) {
                          EXPECT_EQ(failure_of(r), "semaphore wait timed out");
                          ++timed_out;
                      } else {
                          ++ok;
                      }
                  }
                  EXPECT_EQ(ok, 3);
                  EXPECT_EQ(timed_out, 3);
              }),
              0);
}

TEST(semaphore, broken_fails_waiters_and_later_waits) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  semaphore s(0);
                  auto a = s.wait(1);
                  auto b = s.wait(steady_clock_type::now() + 10s, 1);
                  s.broken();
                  auto ra = co_await std::move(a).then_wrapped([](future<> f) { return failure_of(f); });
                  auto rb = co_await std::move(b).then_wrapped([](future<> f) { return failure_of(f); });
                  EXPECT_EQ(ra, "semaphore broken");
                  EXPECT_EQ(rb, "semaphore broken");
                  auto c = s.wait(1);
                  EXPECT_EQ(failure_of(c), "semaphore broken");
                  EXPECT_FALSE(s.try_wait(0));

                  semaphore custom(0);
                  auto d = custom.wait(1);
                  custom.broken(std::make_exception_ptr(std::runtime_error("shutting down")));
                  auto rd = co_await std::move(d).then_wrapped([](future<> f) { return failure_of(f); });
                  EXPECT_EQ(rd, "shutting down");
              }),
              0);
}

TEST(semaphore, destroyed_semaphore_breaks_its_waiters) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto s = std::make_unique<semaphore>(0);
                  auto f = s->wait(steady_clock_type::now() + 10s, 1);
                  s.reset();
                  bool broken = false;
                  try {
                      co_await std::move(f);
                  } catch (const broken_semaphore&) {
                      broken = true;
                  }
                  EXPECT_TRUE(broken);
              }),
              0);
}

TEST(semaphore, units_return_on_destruction) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  semaphore s(4);
                  {
                      auto u = co_await get_units(s, 3);
                      EXPECT_EQ(u.count(), 3u);
                      EXPECT_EQ(s.available_units(), 1u);
                      auto moved = std::move(u);
                      EXPECT_EQ(u.count(), 0u);
                      EXPECT_EQ(s.available_units(), 1u);
                  }
                  EXPECT_EQ(s.available_units(), 4u);
                  auto kept = co_await get_units(s, 2);
                  size_t n = kept.release();
                  EXPECT_EQ(n, 2u);
                  EXPECT_EQ(s.available_units(), 2u); // released: the caller returns them itself
                  s.signal(n);
                  EXPECT_EQ(s.available_units(), 4u);
              }),
              0);
}

TEST(semaphore, with_semaphore_bounds_concurrency) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  semaphore s(2);
                  int inside = 0;
                  int most = 0;
                  std::vector<future<>> fs;
                  // A coroutine lambda's captures live in the closure, which with_semaphore
                  // destroys once it has called it: the body takes what it needs as parameters.
                  auto body = [](int& inside, int& most) -> future<> {
                      ++inside;
                      most = std::max(most, inside);
                      co_await sleep(1ms);
                      --inside;
                  };
                  for (int i = 0; i < 10; ++i) {
                      fs.push_back(with_semaphore(s, 1, [&] { return body(inside, most); }));
                  }
                  co_await when_all_succeed(std::move(fs));
                  EXPECT_EQ(most, 2);
                  EXPECT_EQ(s.available_units(), 2u);
                  // Units come back when the function fails, too.
                  auto f = with_semaphore(
                      s, 2, []() -> future<> { return make_exception_future<>(std::runtime_error("f")); });
                  auto r = co_await std::move(f).then_wrapped([](future<> f) { return failure_of(f); });
                  EXPECT_EQ(r, "f");
                  EXPECT_EQ(s.available_units(), 2u);
              }),
              0);
}
