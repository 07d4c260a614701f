// Time-based preemption: need_preempt() rises once the task quota has run out, the reactor polls
// (and fires timers) between tasks when it does, and a loop of ready co_awaits or a repeat() of
// ready iterations yields on its own instead of starving a timer.
#include "core/future_util.hh"
#include "core/preempt.hh"
#include "core/reactor.hh"
#include "core/timer.hh"
#include "support/patience.hh"
#include "support/run.hh"

#include <chrono>
#include <cstdio>
#include <optional>

#include <gtest/gtest.h>

using namespace shoal;
using namespace std::chrono_literals;
using shoal::testing::run_in_shard;

namespace {

/// How long a loop may run before the test gives up on preemption: a timer due 1 ms after the
/// loop starts fires within a quota (0.5 ms) or two of it, so a loop still running then starved
/// the timer. How late the timer fired is printed, never asserted: a busy host may deschedule the
/// shard for a while.
constexpr auto give_up_after = shoal::testing::patience;

/// Arms a timer 1 ms from now and runs `spin(fired)` on the same shard; returns how late the
/// timer fired, or nothing if the loop ran give_up_after without letting it fire. `spin` must
/// return once `fired` is true.
template <typename Spin>
future<std::optional<steady_clock_type::duration>> timer_lateness_under(Spin spin) {
    bool fired = false;
    auto due = steady_clock_type::now() + 1ms;
    steady_clock_type::time_point fired_at{};
    timer<> t([&] {
        fired = true;
        fired_at = steady_clock_type::now();
    });
    t.arm(due);
    co_await spin(fired);
    if (!fired) {
        co_return std::nullopt;
    }
    co_return fired_at - due;
}

/// The outcome of `timer_lateness_under`: the timer fired while the loop ran.
void expect_fired(const std::optional<steady_clock_type::duration>& late) {
    EXPECT_TRUE(late.has_value()) << "the loop starved the timer";
    if (late) {
        std::printf("timer fired %.3f ms late\n", std::chrono::duration<double, std::milli>(*late).count());
    }
}

/// True when `deadline` passed; reads the clock once every 1024 calls only.
bool past(steady_clock_type::time_point deadline, unsigned& calls) {
    return (++calls & 1023) == 0 && steady_clock_type::now() > deadline;
}

} // namespace

TEST(preempt, never_requested_outside_a_shard) {
    EXPECT_FALSE(need_preempt());
}

TEST(preempt, rises_in_a_busy_task_and_is_lowered_by_the_next_poll) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto deadline = steady_clock_type::now() + give_up_after;
                  while (!need_preempt() && steady_clock_type::now() < deadline) {
                  }
                  EXPECT_TRUE(need_preempt());
                  auto preemptions = local_reactor().stats().preemptions;
                  co_await yield();
                  // The round of tasks was cut short and the reactor polled in between.
                  EXPECT_GT(local_reactor().stats().preemptions, preemptions);
              }),
              0);
}

TEST(preempt, zero_quota_time_never_preempts) {
    reactor_config cfg;
    cfg.task_quota_time = 0us;
    EXPECT_EQ(run_in_shard(
                  []() -> future<> {
                      auto until = steady_clock_type::now() + 20ms;
                      bool raised = false;
                      while (steady_clock_type::now() < until) {
                          raised |= need_preempt();
                      }
                      EXPECT_FALSE(raised);
                      co_return;
                  },
                  cfg),
              0);
}

TEST(preempt, rises_within_one_check_interval_of_calls_once_the_quota_has_passed) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  // The quota counts from the reactor's last poll, before this task: once 0.5 ms
                  // have passed by the test's own clock, the quota has run out, and
                  // need_preempt() says so by its check_interval-th call at the latest.
                  auto past_quota = steady_clock_type::now() + 1ms;
                  while (steady_clock_type::now() < past_quota) {
                  }
                  unsigned calls = 0;
                  while (calls < internal::preempt_check_interval && !need_preempt()) {
                      ++calls;
                  }
                  EXPECT_LT(calls, internal::preempt_check_interval);
                  EXPECT_TRUE(need_preempt()); // stays up until the reactor polls
                  co_await yield();
                  co_return;
              }),
              0);
}

TEST(preempt, rounds_shorter_than_the_quota_are_not_cut_by_it) {
    reactor_config cfg;
    cfg.task_quota = 4; // rounds of a few tasks: microseconds, even under a sanitizer
    EXPECT_EQ(run_in_shard(
                  []() -> future<> {
                      // 20 ms of short task rounds, the reactor polling between them: the quota
                      // counts from each poll, so it never runs out (a timer running from the
                      // first task cut ~40 of these rounds). A host that takes the CPU away for
                      // over 0.5 ms in the middle of a round cuts it: a few at most in 20 ms.
                      const reactor_stats& st = local_reactor().stats();
                      uint64_t preemptions = st.preemptions;
                      uint64_t loops = st.loops;
                      // (Also 40 rounds at least: a thread descheduled for most of the 20 ms runs
                      // few of them; the rounds, not the time, are what the check needs.)
                      auto until = steady_clock_type::now() + 20ms;
                      while (steady_clock_type::now() < until || st.loops - loops <= 40) {
                          co_await yield();
                      }
                      EXPECT_GT(st.loops - loops, 40u);
                      EXPECT_LE(st.preemptions - preemptions, 10u);
                  },
                  cfg),
              0);
}

TEST(preempt, ready_co_awaits_cannot_starve_a_timer) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto late = co_await timer_lateness_under([](bool& fired) -> future<> {
                      auto deadline = steady_clock_type::now() + give_up_after;
                      unsigned calls = 0;
                      while (!fired && !past(deadline, calls)) {
                          co_await make_ready_future<>();
                      }
                  });
                  expect_fired(late);
              }),
              0);
}

TEST(preempt, repeat_of_ready_iterations_cannot_starve_a_timer) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto late = co_await timer_lateness_under([](bool& fired) {
                      auto deadline = steady_clock_type::now() + give_up_after;
                      return do_with(0u, [&fired, deadline](unsigned& calls) {
                          return repeat([&fired, &calls, deadline] {
                              return fired || past(deadline, calls) ? stop_iteration::yes
                                                                    : stop_iteration::no;
                          });
                      });
                  });
                  expect_fired(late);
              }),
              0);
}

TEST(preempt, do_until_of_ready_iterations_cannot_starve_a_timer) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto late = co_await timer_lateness_under([](bool& fired) {
                      auto deadline = steady_clock_type::now() + give_up_after;
                      return do_with(0u, [&fired, deadline](unsigned& calls) {
                          return do_until(
                              [&fired, &calls, deadline] { return fired || past(deadline, calls); }, [] {});
                      });
                  });
                  expect_fired(late);
              }),
              0);
}
