// gate: graceful shutdown waits for the work inside and refuses new work.
#include "core/future_util.hh"
#include "core/gate.hh"
#include "core/timer.hh"
#include "support/run.hh"

#include <chrono>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using namespace std::chrono_literals;
using shoal::testing::run_in_shard;

TEST(gate, close_when_empty_is_ready) {
    gate g;
    g.enter();
    g.leave();
    auto f = g.close();
    EXPECT_TRUE(f.available());
    EXPECT_TRUE(g.is_closed());
    EXPECT_THROW(g.enter(), gate_closed_exception);
    EXPECT_FALSE(g.try_enter());
}

TEST(gate, close_waits_for_work_in_flight) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  gate g;
                  std::vector<promise<>> work(3);
                  std::vector<future<>> running;
                  int finished = 0;
                  for (auto& w : work) {
                      running.push_back(
                          with_gate(g, [&] { return w.get_future().then([&] { ++finished; }); }));
                  }
                  EXPECT_EQ(g.count(), 3u);
                  auto closed = g.close();
                  EXPECT_FALSE(closed.available());
                  // New work is refused while closing.
                  auto refused = with_gate(g, [] { return make_ready_future<>(); });
                  EXPECT_TRUE(refused.failed());
                  EXPECT_THROW(refused.get(), gate_closed_exception);
                  work[1].set_value();
                  work[0].set_value();
                  co_await yield();
                  co_await yield();
                  EXPECT_FALSE(closed.available());
                  EXPECT_EQ(g.count(), 1u);
                  work[2].set_value();
                  co_await std::move(closed);
                  EXPECT_EQ(finished, 3); // everything finished before close resolved
                  EXPECT_EQ(g.count(), 0u);
                  co_await when_all_succeed(std::move(running));
              }),
              0);
}

TEST(gate, failed_work_still_leaves) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  gate g;
                  auto f = with_gate(g, []() -> future<> {
                      co_await sleep(1ms);
                      throw std::runtime_error("work failed");
                  });
                  auto closed = g.close();
                  auto failed = co_await std::move(f).then_wrapped([](future<> r) {
                      bool failed = r.failed();
                      r.ignore_ready_future();
                      return failed;
                  });
                  EXPECT_TRUE(failed);
                  co_await std::move(closed);
                  EXPECT_EQ(g.count(), 0u);
              }),
              0);
}

TEST(gate, holder_keeps_the_gate_open) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  gate g;
                  auto h = g.hold();
                  auto h2 = std::move(h);
                  EXPECT_EQ(g.count(), 1u);
                  auto closed = g.close();
                  EXPECT_THROW(g.hold(), gate_closed_exception);
                  (void)sleep(5ms).then([h = std::move(h2)]() mutable { h.release(); });
                  auto start = steady_clock_type::now();
                  co_await std::move(closed);
                  EXPECT_GE(steady_clock_type::now() - start, 5ms);
              }),
              0);
}
