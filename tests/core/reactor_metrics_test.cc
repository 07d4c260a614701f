// The reactor, io_uring and cross-shard queue metrics: each test causes the event a series
// counts and reads it back from the registry.
#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "core/preempt.hh"
#include "core/reactor.hh"
#include "core/reactor_metrics.hh"
#include "core/smp.hh"
#include "support/patience.hh"
#include "support/run.hh"

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::metrics;

namespace {

/// The calling shard's value of `name` (with label `peer` = `peer` when given); -1 when absent.
double value_of(const std::string& name, const std::string& peer = "") {
    for (const auto& f : collect_local()) {
        if (f.name != name) {
            continue;
        }
        for (const auto& s : f.samples) {
            bool match = peer.empty();
            for (const auto& l : s.series_labels) {
                match |= l.name == "peer" && l.value == peer;
            }
            if (match) {
                return s.value;
            }
        }
    }
    return -1;
}

/// Busy-waits inside one task until the task quota has run out (`need_preempt()`), then for
/// four more quota periods, so the reactor notices the expiry a whole period late whatever the
/// load; false if the quota never ran out within `patience`.
bool spin_past_the_quota() {
    auto give_up = std::chrono::steady_clock::now() + shoal::testing::patience;
    while (!need_preempt()) {
        if (std::chrono::steady_clock::now() > give_up) {
            return false;
        }
    }
    auto until = std::chrono::steady_clock::now() + 4 * local_reactor().config().task_quota_time;
    while (std::chrono::steady_clock::now() < until) {
    }
    return true;
}

/// Busy-waits `d` inside one task.
void spin_for(std::chrono::milliseconds d) {
    auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) {
    }
}

} // namespace

TEST(reactor_metrics, cross_shard_calls_are_counted_per_peer_on_both_sides) {
    int rc = shoal::testing::run_in_shards(3, []() -> future<> {
        auto g0 = publish_reactor_metrics();
        // Shard 1 and 2 publish theirs too; the groups live until the end of the test.
        std::vector<metric_group> remote(3);
        for (unsigned s = 1; s < 3; ++s) {
            co_await submit_to(s, [&remote, s] { remote[s] = publish_reactor_metrics(); });
        }
        double sent_before = value_of("shoal_smp_calls_sent_total", "1");
        double other_before = value_of("shoal_smp_calls_sent_total", "2");
        double received_before =
            co_await submit_to(1, [] { return value_of("shoal_smp_calls_received_total", "0"); });
        EXPECT_GE(sent_before, 0);
        EXPECT_EQ(value_of("shoal_smp_calls_sent_total", "0"), -1) << "no series for the shard itself";

        constexpr unsigned calls = 100;
        std::vector<future<>> fs;
        for (unsigned i = 0; i < calls; ++i) {
            fs.push_back(submit_to(1, [] {}));
        }
        co_await when_all(std::move(fs));
        // The read of shard 1's counter above was one more call to shard 1.
        EXPECT_EQ(value_of("shoal_smp_calls_sent_total", "1"), sent_before + calls + 1);
        EXPECT_EQ(value_of("shoal_smp_calls_sent_total", "2"), other_before) << "calls to shard 1 only";
        double received =
            co_await submit_to(1, [] { return value_of("shoal_smp_calls_received_total", "0"); });
        EXPECT_EQ(received, received_before + calls + 1); // the 100 and the first read
        EXPECT_EQ(value_of("shoal_smp_calls_in_flight", "1"), 0);
        for (unsigned s = 1; s < 3; ++s) {
            co_await submit_to(s, [&remote, s] { remote[s].clear(); });
        }
    });
    EXPECT_EQ(rc, 0);
}

TEST(reactor_metrics, calls_over_the_in_flight_bound_show_as_waiting_and_backlog) {
    int rc = shoal::testing::run_in_shards(2, []() -> future<> {
        auto g = publish_reactor_metrics();
        constexpr unsigned calls = smp_max_in_flight + 44;
        std::vector<future<>> fs;
        for (unsigned i = 0; i < calls; ++i) {
            fs.push_back(submit_to(1, [] {}));
        }
        // Nothing is published before this task ends: all are this shard's own backlog.
        EXPECT_EQ(value_of("shoal_smp_calls_in_flight", "1"), smp_max_in_flight);
        EXPECT_EQ(value_of("shoal_smp_calls_waiting", "1"), 44);
        EXPECT_EQ(value_of("shoal_smp_backlog", "1"), smp_max_in_flight);
        co_await when_all(std::move(fs));
        EXPECT_EQ(value_of("shoal_smp_calls_in_flight", "1"), 0);
        EXPECT_EQ(value_of("shoal_smp_calls_waiting", "1"), 0);
        EXPECT_EQ(value_of("shoal_smp_backlog", "1"), 0);
    });
    EXPECT_EQ(rc, 0);
}

TEST(reactor_metrics, a_task_longer_than_the_quota_is_a_long_task) {
    int rc = shoal::testing::run_in_shard([]() -> future<> {
        auto g = publish_reactor_metrics();
        double before = value_of("shoal_reactor_long_tasks_total");
        EXPECT_GE(before, 0);
        bool spanned = co_await yield().then([] { return spin_past_the_quota(); });
        EXPECT_TRUE(spanned) << "the task quota did not run out in 10 s";
        co_await yield();
        EXPECT_GE(value_of("shoal_reactor_long_tasks_total"), before + 1); // more when load stretches others
    });
    EXPECT_EQ(rc, 0);
}

TEST(reactor_metrics, without_a_time_quota_no_task_is_long) {
    reactor_config cfg;
    cfg.task_quota_time = std::chrono::microseconds(0); // no preemption timer
    int rc = shoal::testing::run_in_shard(
        []() -> future<> {
            auto g = publish_reactor_metrics();
            co_await yield().then([] { spin_for(std::chrono::milliseconds(20)); });
            co_await yield();
            EXPECT_EQ(value_of("shoal_reactor_long_tasks_total"), 0);
        },
        cfg);
    EXPECT_EQ(rc, 0);
}

TEST(reactor_metrics, completions_beyond_the_cq_ring_raise_the_overflow_counter) {
    reactor_config cfg;
    cfg.ring_entries = 4; // a CQ of 8 entries
    int rc = shoal::testing::run_in_shard(
        []() -> future<> {
            auto g = publish_reactor_metrics();
            EXPECT_EQ(value_of("shoal_io_uring_cq_overflow_flushes_total"), 0);
            double sqes = value_of("shoal_io_uring_sqes_submitted_total");
            double cqes = value_of("shoal_io_uring_cqes_total");
            // 64 no-ops from one task: the full SQ is submitted every 4, and the no-ops complete
            // at once, far more than the 8 CQ entries hold before the reactor reaps them.
            constexpr int ops = 64;
            std::vector<future<int>> fs;
            for (int i = 0; i < ops; ++i) {
                fs.push_back(local_reactor().submit_io([](io_uring_sqe* sqe) { io_uring_prep_nop(sqe); }));
            }
            auto results = co_await when_all_succeed(std::move(fs));
            EXPECT_EQ(results.size(), size_t(ops));
            EXPECT_GE(value_of("shoal_io_uring_cq_overflow_flushes_total"), 1);
            EXPECT_EQ(value_of("shoal_io_uring_cq_dropped_total"), 0) << "the kernel held them back";
            EXPECT_GE(value_of("shoal_io_uring_sqes_submitted_total"), sqes + ops);
            EXPECT_GE(value_of("shoal_io_uring_cqes_total"), cqes + ops);
        },
        cfg);
    EXPECT_EQ(rc, 0);
}
