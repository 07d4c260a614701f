// The idle spin window (core/idle_spin.hh) shrinks after spins that find nothing and after the
// thread was preempted, grows back after spins that find work; an idle engine's preemption
// ticker parks instead of waking every task-quota period.
#include "core/idle_spin.hh"
#include "core/reactor.hh"
#include "core/timer.hh"
#include "run_in_shards.hh"

#include <chrono>

#include <gtest/gtest.h>

using namespace shoal;
using namespace std::chrono_literals;
using shoal::testing::run_in_shards;

TEST(idle_spin, shrinks_to_zero_after_unproductive_spins) {
    idle_spin s(200us, true);
    EXPECT_EQ(s.begin(0), 200us);
    // Each spin that found nothing, followed by a long sleep, halves the window; below an
    // eighth of the maximum it is 0: the reactor sleeps at once.
    for (int i = 0; i < 4; ++i) {
        s.spin_expired();
        s.slept(10ms);
        (void)s.begin(0);
    }
    EXPECT_EQ(s.window(), 0us);
    EXPECT_FALSE(s.wants_switches()); // no getrusage while there is no spin to decide on
}

TEST(idle_spin, recovers_after_productive_periods) {
    idle_spin s(200us, true);
    for (int i = 0; i < 4; ++i) {
        s.spin_expired();
    }
    ASSERT_EQ(s.window(), 0us);
    // A sleep that work ended within 200 us: a spin would have caught it.
    s.slept(50us);
    EXPECT_EQ(s.window(), 25us);
    s.spin_found_work();
    s.spin_found_work();
    s.spin_found_work();
    EXPECT_EQ(s.window(), 200us);
    s.spin_found_work();
    EXPECT_EQ(s.window(), 200us); // never above the configured maximum
}

TEST(idle_spin, preemption_halves_the_window) {
    idle_spin s(200us, true);
    EXPECT_EQ(s.begin(7), 200us); // the first count is the baseline
    EXPECT_EQ(s.begin(8), 100us); // preempted since the last idle period
    EXPECT_EQ(s.begin(8), 100us); // not since the last one
    EXPECT_EQ(s.begin(9), 50us);
    EXPECT_EQ(s.begin(10), 25us);
    EXPECT_EQ(s.begin(11), 0us);
}

TEST(idle_spin, not_adaptive_always_spins_the_maximum) {
    idle_spin s(200us, false);
    for (int i = 0; i < 10; ++i) {
        EXPECT_EQ(s.begin(uint64_t(i)), 200us);
        s.spin_expired();
        s.slept(1s);
    }
    EXPECT_FALSE(s.wants_switches());
}

TEST(idle_spin, zero_maximum_never_spins) {
    idle_spin s(0us, true);
    s.slept(0us);
    s.spin_found_work();
    EXPECT_EQ(s.begin(0), 0us);
}

TEST(idle_spin, an_idle_reactor_stops_spinning) {
    // A shard that sleeps on a timer over and over: its spins find nothing, so the window drops
    // to 0 (the timer's wake-ups come after 2 ms, later than the 200 us a spin would cover).
    EXPECT_EQ(run_in_shards(1,
                            []() -> future<> {
                                for (int i = 0; i < 20; ++i) {
                                    co_await sleep(2ms);
                                }
                                EXPECT_EQ(local_reactor().idle_spin_window(), 0us);
                                EXPECT_GT(local_reactor().stats().idle_spins_expired, 0u);
                            }),
              0);
}

TEST(idle_spin, the_ticker_parks_in_an_idle_engine) {
    // 0.5 ms quota: a ticker that never parks raises each shard's flag ~2,000 times in 1 s. An
    // idle engine (two shards asleep on a timer) lets it park after two periods.
    uint32_t ticks = 0;
    EXPECT_EQ(run_in_shards(2,
                            [&]() -> future<> {
                                uint32_t before = local_reactor().preempt_ticks();
                                co_await sleep(1s);
                                ticks = local_reactor().preempt_ticks() - before;
                            }),
              0);
    EXPECT_LT(ticks, 200u) << "the ticker raised the flag " << ticks << " times in 1 s";
}
