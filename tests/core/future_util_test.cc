// Utilities over futures: when_all, when_all_succeed, parallel_for_each, repeat, do_until,
// keep_doing, do_with, yield and with_timeout.
#include "core/future_util.hh"
#include "core/timer.hh"
#include "support/patience.hh"
#include "support/run.hh"
#include "test_failures.hh"

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using shoal::testing::failure_of;
using shoal::testing::test_error;
using namespace std::chrono_literals;
using shoal::testing::run_in_shard;

namespace {

/// Runs `func` after the reactor has run a few rounds of other tasks.
template <typename Func>
future<> later(Func func, int rounds = 3) {
    for (int i = 0; i < rounds; ++i) {
        co_await yield();
    }
    func();
}

} // namespace

TEST(when_all, vector_waits_for_every_future) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  std::vector<promise<int>> ps(4);
                  std::vector<future<int>> fs;
                  for (auto& p : ps) {
                      fs.push_back(p.get_future());
                  }
                  fs.push_back(make_ready_future<int>(100));
                  auto all = when_all(std::move(fs));
                  ps[3].set_value(3);
                  ps[0].set_value(0);
                  co_await yield();
                  EXPECT_FALSE(all.available());
                  ps[2].set_exception(test_error("two"));
                  ps[1].set_value(1);
                  auto rs = co_await std::move(all);
                  CO_ASSERT_TRUE(rs.size() == 5u);
                  EXPECT_EQ(rs[0].get(), 0);
                  EXPECT_EQ(rs[1].get(), 1);
                  EXPECT_EQ(failure_of(rs[2]), "two");
                  EXPECT_EQ(rs[3].get(), 3);
                  EXPECT_EQ(rs[4].get(), 100);
              }),
              0);
}

TEST(when_all, variadic_keeps_types) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<std::string> ps;
                  auto all = when_all(make_ready_future<int>(1), ps.get_future(), sleep(1ms));
                  (void)later([&] { ps.set_value("s"); });
                  auto [i, s, v] = co_await std::move(all);
                  EXPECT_EQ(i.get(), 1);
                  EXPECT_EQ(s.get(), "s");
                  EXPECT_FALSE(v.failed());
                  v.get();
              }),
              0);
}

TEST(when_all, empty_vector) {
    auto f = when_all(std::vector<future<int>>{});
    ASSERT_TRUE(f.available());
    EXPECT_TRUE(f.get().empty());
}

TEST(when_all_succeed, collects_values_in_order) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  std::vector<promise<int>> ps(3);
                  std::vector<future<int>> fs;
                  for (auto& p : ps) {
                      fs.push_back(p.get_future());
                  }
                  auto all = when_all_succeed(std::move(fs));
                  ps[2].set_value(2);
                  ps[1].set_value(1);
                  ps[0].set_value(0);
                  auto values = co_await std::move(all);
                  EXPECT_EQ(values, (std::vector<int>{0, 1, 2}));
              }),
              0);
}

TEST(when_all_succeed, fails_with_the_first_exception_after_all_resolved) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  std::vector<promise<>> ps(3);
                  std::vector<future<>> fs;
                  for (auto& p : ps) {
                      fs.push_back(p.get_future());
                  }
                  auto all = when_all_succeed(std::move(fs));
                  ps[1].set_exception(test_error("one"));
                  ps[0].set_exception(test_error("zero"));
                  co_await yield();
                  co_await yield();
                  EXPECT_FALSE(all.available()); // ps[2] still pending
                  ps[2].set_value();
                  auto r = co_await std::move(all).then_wrapped([](future<> f) { return failure_of(f); });
                  EXPECT_EQ(r, "zero"); // first in order
              }),
              0);
}

TEST(parallel_for_each, starts_everything_at_once) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  std::vector<promise<>> ps(5);
                  std::vector<int> started;
                  std::vector<int> items{0, 1, 2, 3, 4};
                  auto all = parallel_for_each(items, [&](int i) {
                      started.push_back(i);
                      return ps[i].get_future();
                  });
                  EXPECT_EQ(started, items);
                  EXPECT_FALSE(all.available());
                  for (int i : {4, 2, 0, 1}) {
                      ps[i].set_value();
                  }
                  co_await yield();
                  EXPECT_FALSE(all.available());
                  ps[3].set_value();
                  co_await std::move(all);
              }),
              0);
}

TEST(parallel_for_each, failure_waits_for_the_rest) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<> slow;
                  int finished = 0;
                  std::vector<int> items{0, 1, 2};
                  auto all = parallel_for_each(items, [&](int i) -> future<> {
                      if (i == 0) {
                          throw test_error("sync failure");
                      }
                      if (i == 1) {
                          return slow.get_future().then([&] { ++finished; });
                      }
                      ++finished;
                      return make_ready_future<>();
                  });
                  co_await yield();
                  EXPECT_FALSE(all.available());
                  slow.set_value();
                  auto r = co_await std::move(all).then_wrapped([](future<> f) { return failure_of(f); });
                  EXPECT_EQ(r, "sync failure");
                  EXPECT_EQ(finished, 2);

                  // All ready, one failed.
                  auto ready = parallel_for_each(items, [](int i) {
                      return i == 2 ? make_exception_future<>(test_error("ready failure"))
                                    : make_ready_future<>();
                  });
                  EXPECT_EQ(failure_of(ready), "ready failure");
              }),
              0);
}

TEST(repeat, runs_until_stop_iteration_yes) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  int n = 0;
                  co_await repeat([&] { return ++n == 10 ? stop_iteration::yes : stop_iteration::no; });
                  EXPECT_EQ(n, 10);
                  int m = 0;
                  co_await repeat([&] {
                      return sleep(1ms).then(
                          [&] { return ++m == 3 ? stop_iteration::yes : stop_iteration::no; });
                  });
                  EXPECT_EQ(m, 3);
              }),
              0);
}

TEST(repeat, exception_stops_the_loop) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  int n = 0;
                  auto f = repeat([&]() -> stop_iteration {
                      if (++n == 4) {
                          throw test_error("stop");
                      }
                      return stop_iteration::no;
                  });
                  auto r = co_await std::move(f).then_wrapped([](future<> f) { return failure_of(f); });
                  EXPECT_EQ(r, "stop");
                  EXPECT_EQ(n, 4);
              }),
              0);
}

TEST(repeat, long_ready_runs_let_other_tasks_in) {
    EXPECT_EQ(
        run_in_shard([]() -> future<> {
            int other = 0;
            bool stop_other = false;
            auto background = repeat([&] {
                ++other;
                return yield().then([&] { return stop_other ? stop_iteration::yes : stop_iteration::no; });
            });
            int seen_at_start = other;
            // An always-ready loop that runs until the other loop got a turn: the task quota
            // (0.5 ms) makes it yield; the deadline only turns starvation into a failure.
            auto deadline = steady_clock_type::now() + shoal::testing::patience;
            co_await repeat([&] {
                return other > seen_at_start || steady_clock_type::now() > deadline ? stop_iteration::yes
                                                                                    : stop_iteration::no;
            });
            EXPECT_GT(other, seen_at_start); // the always-ready loop did not starve it
            stop_other = true;
            co_await std::move(background);
        }),
        0);
}

TEST(do_until, checks_the_condition_first) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  int calls = 0;
                  co_await do_until([] { return true; }, [&] { ++calls; });
                  EXPECT_EQ(calls, 0);
                  int n = 0;
                  co_await do_until([&] { return n == 5; }, [&] { return yield().then([&] { ++n; }); });
                  EXPECT_EQ(n, 5);
                  auto f = do_until([] { return false; },
                                    []() -> future<> { return make_exception_future<>(test_error("du")); });
                  auto r = co_await std::move(f).then_wrapped([](future<> f) { return failure_of(f); });
                  EXPECT_EQ(r, "du");
              }),
              0);
}

TEST(keep_doing, runs_until_failure) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  int n = 0;
                  auto f = keep_doing([&]() -> future<> {
                      if (++n == 20) {
                          return make_exception_future<>(test_error("enough"));
                      }
                      return yield();
                  });
                  auto r = co_await std::move(f).then_wrapped([](future<> f) { return failure_of(f); });
                  EXPECT_EQ(r, "enough");
                  EXPECT_EQ(n, 20);
              }),
              0);
}

TEST(do_with, keeps_values_alive_at_stable_addresses) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  struct tracked {
                      std::string text;
                      bool* alive;
                      tracked(std::string t, bool* a)
                          : text(std::move(t))
                          , alive(a) {
                          *alive = true;
                      }
                      tracked(tracked&& o) noexcept
                          : text(std::move(o.text))
                          , alive(std::exchange(o.alive, nullptr)) {}
                      ~tracked() {
                          if (alive) {
                              *alive = false;
                          }
                      }
                  };
                  bool alive = false;
                  promise<> gate;
                  const tracked* seen = nullptr;
                  auto f = do_with(tracked("kept", &alive), 7, [&](tracked& t, int& n) {
                      seen = &t;
                      return gate.get_future().then([&t, &n, &seen] {
                          EXPECT_EQ(&t, seen); // same object after the suspension
                          EXPECT_EQ(t.text, "kept");
                          return n * 2;
                      });
                  });
                  co_await yield();
                  EXPECT_TRUE(alive);
                  gate.set_value();
                  EXPECT_EQ(co_await std::move(f), 14);
                  EXPECT_FALSE(alive);

                  auto ready = do_with(std::string("r"), [](std::string& s) { return s + "!"; });
                  EXPECT_EQ(ready.get(), "r!");
              }),
              0);
}

TEST(yield, lets_queued_tasks_run_first) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  std::vector<int> order;
                  promise<> p;
                  auto other = p.get_future().then([&] { order.push_back(1); });
                  p.set_value();
                  co_await yield();
                  order.push_back(2);
                  co_await std::move(other);
                  EXPECT_EQ(order, (std::vector<int>{1, 2}));
              }),
              0);
}

TEST(with_timeout, value_before_the_deadline) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<int> p;
                  auto f = with_timeout(steady_clock_type::now() + 10s, p.get_future());
                  (void)later([&] { p.set_value(5); });
                  EXPECT_EQ(co_await std::move(f), 5);
                  // A failure before the deadline passes through.
                  promise<int> q;
                  auto g = with_timeout(steady_clock_type::now() + 10s, q.get_future());
                  q.set_exception(test_error("inner"));
                  auto r = co_await std::move(g).then_wrapped([](future<int> f) { return failure_of(f); });
                  EXPECT_EQ(r, "inner");
              }),
              0);
}

TEST(with_timeout, times_out_and_drops_the_late_value) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto p = std::make_unique<promise<std::string>>();
                  auto start = steady_clock_type::now();
                  auto f = with_timeout(start + 20ms, p->get_future());
                  bool timed_out = false;
                  try {
                      co_await std::move(f);
                  } catch (const timed_out_error&) {
                      timed_out = true;
                  }
                  EXPECT_TRUE(timed_out);
                  EXPECT_GE(steady_clock_type::now() - start, 20ms);
                  p->set_value("too late"); // dropped, freed
                  co_await yield();
                  // A promise abandoned after the timeout is harmless too.
                  auto q = std::make_unique<promise<int>>();
                  auto g = with_timeout(steady_clock_type::now() + 1ms, q->get_future());
                  auto r = co_await std::move(g).then_wrapped([](future<int> f) { return failure_of(f); });
                  EXPECT_EQ(r, "timed out");
                  q.reset();
                  co_await yield();
              }),
              0);
}

TEST(with_timeout, ready_future_passes_through) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto f = with_timeout(steady_clock_type::now() - 1s, make_ready_future<int>(1));
                  EXPECT_TRUE(f.available());
                  EXPECT_EQ(co_await std::move(f), 1);
              }),
              0);
}

TEST(with_timeout, lowres_clock_deadline) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<> never;
                  auto start = lowres_clock::now();
                  auto f = with_timeout<void, lowres_clock>(start + 5ms, never.get_future());
                  bool timed_out = false;
                  try {
                      co_await std::move(f);
                  } catch (const timed_out_error&) {
                      timed_out = true;
                  }
                  EXPECT_TRUE(timed_out);
                  EXPECT_GE(lowres_clock::now() - start, 5ms);
              }),
              0);
}
