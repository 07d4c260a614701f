// The per-shard metrics registry and the Prometheus text format.
#include "core/metrics.hh"
#include "core/prometheus_format.hh"
#include "core/smp.hh"
#include "support/run.hh"

#include <cmath>
#include <stdexcept>

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::metrics;

namespace {

const family* find(const std::vector<family>& fs, const std::string& name) {
    for (const auto& f : fs) {
        if (f.name == name) {
            return &f;
        }
    }
    return nullptr;
}

std::string label_of(const sample& s, const std::string& name) {
    for (const auto& l : s.series_labels) {
        if (l.name == name) {
            return l.value;
        }
    }
    return "<none>";
}

} // namespace

TEST(metrics, counters_and_gauges_are_read_when_collected) {
    counter c;
    gauge g;
    uint64_t external = 7;
    size_t before = local_series_count();
    {
        metric_group grp;
        grp.add_counter("test_events_total", "Events.", c, {{"kind", "a"}})
            .add_gauge("test_level", "Level.", g)
            .add_counter("test_external_total", "Read from a struct.",
                         [&external]() -> std::optional<double> { return double(external); });
        c.add(3);
        c.add();
        g.set(2.5);
        g.add(-1);
        external = 42;
        auto fs = collect_local();
        const family* ev = find(fs, "test_events_total");
        ASSERT_NE(ev, nullptr);
        EXPECT_EQ(ev->type, kind::counter);
        EXPECT_EQ(ev->help, "Events.");
        ASSERT_EQ(ev->samples.size(), 1u);
        EXPECT_EQ(ev->samples[0].value, 4);
        ASSERT_EQ(ev->samples[0].series_labels.size(), 2u);
        EXPECT_EQ(ev->samples[0].series_labels[0], (label{"shard", "0"}));
        EXPECT_EQ(ev->samples[0].series_labels[1], (label{"kind", "a"}));
        EXPECT_EQ(find(fs, "test_level")->samples[0].value, 1.5);
        EXPECT_EQ(find(fs, "test_external_total")->samples[0].value, 42);
        EXPECT_EQ(local_series_count(), before + 3);
    }
    // The group's destruction unregistered everything.
    EXPECT_EQ(local_series_count(), before);
    EXPECT_EQ(find(collect_local(), "test_events_total"), nullptr);
}

TEST(metrics, a_reader_without_value_leaves_the_series_out) {
    bool present = false;
    metric_group grp;
    grp.add_gauge("test_maybe", "Sometimes there.", [&present]() -> std::optional<double> {
        return present ? std::optional<double>(1) : std::nullopt;
    });
    EXPECT_EQ(find(collect_local(), "test_maybe"), nullptr);
    present = true;
    ASSERT_NE(find(collect_local(), "test_maybe"), nullptr);
}

TEST(metrics, bad_registrations_throw_and_register_nothing) {
    counter c;
    gauge g;
    metric_group grp;
    grp.add_counter("test_ok_total", "Fine.", c, {{"x", "1"}});
    size_t before = local_series_count();
    EXPECT_THROW(grp.add_counter("test_no_suffix", "Counter without _total.", c), std::invalid_argument);
    EXPECT_THROW(grp.add_gauge("test_gauge_total", "Gauge with _total.", g), std::invalid_argument);
    EXPECT_THROW(grp.add_gauge("1bad", "Starts with a digit.", g), std::invalid_argument);
    EXPECT_THROW(grp.add_gauge("test-dash", "Dash.", g), std::invalid_argument);
    EXPECT_THROW(grp.add_gauge("test_help", "", g), std::invalid_argument);
    EXPECT_THROW(grp.add_gauge("test_help2", "two\nlines", g), std::invalid_argument);
    EXPECT_THROW(grp.add_gauge("test_sum", "Reserved suffix.", g), std::invalid_argument);
    EXPECT_THROW(grp.add_gauge("test_l", "Shard label.", g, {{"shard", "3"}}), std::invalid_argument);
    EXPECT_THROW(grp.add_gauge("test_l", "Reserved label.", g, {{"__x", "3"}}), std::invalid_argument);
    EXPECT_THROW(grp.add_gauge("test_l", "Twice.", g, {{"a", "1"}, {"a", "2"}}), std::invalid_argument);
    EXPECT_THROW(grp.add_gauge("test_l", "Bad label.", g, {{"a-b", "1"}}), std::invalid_argument);
    // Same series twice, or the same name with another type or description.
    EXPECT_THROW(grp.add_counter("test_ok_total", "Fine.", c, {{"x", "1"}}), std::invalid_argument);
    EXPECT_THROW(grp.add_counter("test_ok_total", "Other help.", c, {{"x", "2"}}), std::invalid_argument);
    EXPECT_EQ(local_series_count(), before);
    // Another label value of the same family is fine.
    grp.add_counter("test_ok_total", "Fine.", c, {{"x", "2"}});
    EXPECT_EQ(find(collect_local(), "test_ok_total")->samples.size(), 2u);
}

TEST(metrics, histogram_buckets_are_cumulative_with_sum_and_count) {
    histogram h({1, 10, 100});
    metric_group grp;
    grp.add_histogram("test_latency_seconds", "Latency.", h);
    for (double v : {0.5, 1.0, 5.0, 50.0, 500.0, 1000.0}) {
        h.observe(v);
    }
    EXPECT_EQ(h.buckets(), (std::vector<uint64_t>{2, 1, 1, 2})); // le is inclusive
    auto fs = collect_local();
    const family* f = find(fs, "test_latency_seconds");
    ASSERT_NE(f, nullptr);
    const histogram_value& v = f->samples[0].distribution;
    EXPECT_EQ(v.cumulative, (std::vector<uint64_t>{2, 3, 4, 6}));
    EXPECT_EQ(v.count, 6u);
    EXPECT_DOUBLE_EQ(v.sum, 1556.5);
    EXPECT_THROW(histogram({}), std::invalid_argument);
    EXPECT_THROW(histogram({2, 1}), std::invalid_argument);
    EXPECT_THROW(histogram::exponential(0, 2, 4), std::invalid_argument);
    EXPECT_EQ(histogram::exponential(1e-6, 10, 3).bounds().size(), 3u);
}

TEST(metrics, power_of_two_histograms_bucket_exactly_like_a_scan) {
    // exponential(_, 2, _) takes the constant-time path; it must agree with counting the bounds
    // below each sample, also right at, just below and just above every bound.
    for (double start : {1e-6, 1.0, 3.0, 0.1}) {
        histogram h = histogram::exponential(start, 2, 20);
        std::vector<double> samples = {0, -1, start / 3, 1e300, start * 1e7};
        for (double b : h.bounds()) {
            samples.push_back(b);
            samples.push_back(std::nextafter(b, 0.0));
            samples.push_back(std::nextafter(b, 1e308));
            samples.push_back(b * 1.5);
        }
        std::vector<uint64_t> expected(h.bounds().size() + 1, 0);
        for (double v : samples) {
            size_t below = 0;
            for (double b : h.bounds()) {
                below += v > b;
            }
            ++expected[below];
            h.observe(v);
        }
        EXPECT_EQ(h.buckets(), expected) << "start " << start;
    }
}

TEST(metrics, prometheus_text_format) {
    std::vector<family> fs(3);
    fs[0] = {"x_total",
             "Line with \\ and\nnewline.",
             kind::counter,
             {{{{"shard", "0"}, {"v", "a\"b\\c\nd"}}, 3, {}}}};
    fs[1] = {"y", "A gauge.", kind::gauge, {{{{"shard", "1"}}, 0.25, {}}}};
    fs[2] = {
        "z_seconds", "A histogram.", kind::histogram, {{{{"shard", "0"}}, 0, {{0.5, 1}, {1, 3, 4}, 2.5, 4}}}};
    EXPECT_EQ(format_prometheus(fs), "# HELP x_total Line with \\\\ and\\nnewline.\n"
                                     "# TYPE x_total counter\n"
                                     "x_total{shard=\"0\",v=\"a\\\"b\\\\c\\nd\"} 3\n"
                                     "# HELP y A gauge.\n"
                                     "# TYPE y gauge\n"
                                     "y{shard=\"1\"} 0.25\n"
                                     "# HELP z_seconds A histogram.\n"
                                     "# TYPE z_seconds histogram\n"
                                     "z_seconds_bucket{shard=\"0\",le=\"0.5\"} 1\n"
                                     "z_seconds_bucket{shard=\"0\",le=\"1\"} 3\n"
                                     "z_seconds_bucket{shard=\"0\",le=\"+Inf\"} 4\n"
                                     "z_seconds_sum{shard=\"0\"} 2.5\n"
                                     "z_seconds_count{shard=\"0\"} 4\n");
}

TEST(metrics, collect_all_shards_merges_families_with_a_shard_label_each) {
    int rc = shoal::testing::run_in_shards(2, []() -> future<> {
        // Each shard registers the same family with its own value: its shard id + 10.
        std::vector<std::unique_ptr<metric_group>> groups(2);
        for (unsigned s = 0; s < 2; ++s) {
            co_await submit_to(s, [&groups, s] {
                groups[s] = std::make_unique<metric_group>();
                groups[s]->add_gauge("test_shard_value", "Per shard.",
                                     []() -> std::optional<double> { return 10.0 + this_shard_id(); });
            });
        }
        auto fs = co_await collect_all_shards();
        const family* f = find(fs, "test_shard_value");
        EXPECT_NE(f, nullptr);
        if (f) {
            EXPECT_EQ(f->samples.size(), 2u);
            for (const auto& s : f->samples) {
                EXPECT_EQ(label_of(s, "shard"), std::to_string(int(s.value) - 10));
            }
            EXPECT_EQ(label_of(f->samples[0], "shard"), "0");
        }
        for (unsigned s = 0; s < 2; ++s) {
            co_await submit_to(s, [&groups, s] { groups[s].reset(); }); // unregister on its shard
        }
    });
    EXPECT_EQ(rc, 0);
}

TEST(metrics, a_group_belongs_to_the_shard_it_registered_on) {
    int rc = shoal::testing::run_in_shards(2, []() -> future<> {
        gauge x;
        metric_group g;
        co_await submit_to(1, [&] { g.add_gauge("test_on_one", "On shard 1.", x); });
        EXPECT_THROW(g.add_gauge("test_on_zero", "Elsewhere.", x), std::logic_error);
        size_t on0 = local_series_count();
        size_t on1 = co_await submit_to(1, [] { return local_series_count(); });
        // Cleared on shard 0: neither shard 0's registry (whose ids may collide) nor shard 1's
        // (another thread) is touched.
        g.clear();
        EXPECT_EQ(local_series_count(), on0);
        EXPECT_EQ(co_await submit_to(1, [] { return local_series_count(); }), on1);
        // A group cleared on its own shard unregisters.
        metric_group h;
        co_await submit_to(1, [&] {
            h.add_gauge("test_on_one_again", "On shard 1.", x);
            EXPECT_EQ(local_series_count(), on1 + 1);
            h.clear();
            EXPECT_EQ(local_series_count(), on1);
        });
    });
    EXPECT_EQ(rc, 0);
}
