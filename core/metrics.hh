#pragma once

#include "core/future.hh"

#include <bit>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

// Per-shard metrics: counters, gauges and histograms that a component registers on its shard
// with a name, a description and labels. Everything here is shard-local: registering, updating
// and reading touch only the calling shard's registry, with no atomics and no locks. Metrics
// either own their value (`counter`, `gauge`, `histogram`, updated on the hot path with a plain
// add) or read a component's existing stats struct when they are collected (a callback), so
// publishing a counter that already exists costs the hot path nothing.
namespace shoal::metrics {

/// One label of a series (`shard` is added to every series by the registry).
struct label {
    std::string name;
    std::string value;
    bool operator==(const label&) const = default;
};
using labels = std::vector<label>;

/// What a metric family is, as the Prometheus exposition format names it.
enum class kind : uint8_t { counter, gauge, histogram };

/// A monotonic count owned by a component; `add` is a plain increment on its shard.
class counter {
public:
    void add(uint64_t n = 1) noexcept { _value += n; }
    uint64_t value() const noexcept { return _value; }

private:
    uint64_t _value = 0;
};

/// A value that goes up and down, owned by a component.
class gauge {
public:
    void set(double v) noexcept { _value = v; }
    void add(double v) noexcept { _value += v; }
    double value() const noexcept { return _value; }

private:
    double _value = 0;
};

/// A distribution over fixed bucket upper bounds (the `+Inf` bucket is implicit). `observe` finds
/// the bucket (a branch-free scan of the bounds, or for factor-2 exponential bounds the sample's
/// binary exponent) and does three adds: a few nanoseconds, no allocation.
class histogram {
public:
    /// Buckets with these upper bounds: finite, strictly increasing, at least one, at most 64.
    /// Throws std::invalid_argument otherwise.
    explicit histogram(std::vector<double> upper_bounds);
    /// `count` bounds: start, start*factor, start*factor^2, ... (start > 0, factor > 1). With
    /// factor 2 `observe` finds the bucket from the sample's binary exponent, in constant time.
    static histogram exponential(double start, double factor, unsigned count);

    /// Records one sample.
    void observe(double v) noexcept {
        ++_buckets[_pow2 ? pow2_bucket(v) : scan_bucket(v)];
        _sum += v;
        ++_count;
    }

    /// The upper bounds.
    const std::vector<double>& bounds() const noexcept { return _bounds; }
    /// Samples per bucket (not cumulative); the last one is the `+Inf` bucket.
    const std::vector<uint64_t>& buckets() const noexcept { return _buckets; }
    /// Sum of every sample.
    double sum() const noexcept { return _sum; }
    /// Number of samples.
    uint64_t count() const noexcept { return _count; }

private:
    /// The first bucket whose bound is >= v, by comparing with every bound (any bounds).
    unsigned scan_bucket(double v) const noexcept {
        unsigned i = 0;
        for (double b : _bounds) {
            i += v > b; // no branch: compares and adds
        }
        return i;
    }
    /// The same for bounds start * 2^k: the binary exponent of v / start gives the bucket up to
    /// one, which one compare with each neighbour bound settles (exact at the bounds).
    unsigned pow2_bucket(double v) const noexcept {
        double x = v * _inv_start;
        if (!(x > 1)) { // also NaN and negatives: the first bucket
            return v > _bounds[0] ? 1 : 0;
        }
        int e = int((std::bit_cast<uint64_t>(x) >> 52) & 0x7ff) - 1023; // 2^e <= x < 2^(e+1)
        unsigned n = unsigned(_bounds.size());
        unsigned i = e >= int(n) ? n : unsigned(e) + 1;
        if (i > 0 && v <= _bounds[i - 1]) {
            --i;
        } else if (i < n && v > _bounds[i]) {
            ++i;
        }
        return i;
    }

    std::vector<double> _bounds;
    bool _pow2 = false;    // bounds are _bounds[0] * 2^k
    double _inv_start = 0; // 1 / _bounds[0]
    std::vector<uint64_t> _buckets;
    double _sum = 0;
    uint64_t _count = 0;
};

/// A histogram's values at collection time, with cumulative bucket counts as Prometheus wants.
struct histogram_value {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative; ///< one per bound, then the `+Inf` bucket (== count)
    double sum = 0;
    uint64_t count = 0;
};

/// One series at collection time: its labels (`shard` first) and value.
struct sample {
    labels series_labels;
    double value = 0;             ///< counters and gauges
    histogram_value distribution; ///< histograms
};

/// Every series of one name, as collected from one or more shards.
struct family {
    std::string name;
    std::string help;
    metrics::kind type = kind::counter;
    std::vector<sample> samples;
};

/// Reads a value when the metric is collected; nothing means "no series now" (a resource that
/// does not exist at the moment, such as RDMA before the transport started).
using reader = std::function<std::optional<double>()>;

/// A set of metrics a component registers on the calling shard; they are unregistered when the
/// group is destroyed or cleared, which must happen on that shard (elsewhere the registrations
/// are left alone and an error is logged; registering on a second shard throws std::logic_error). The `shard`
/// label is added to every series. Names follow Prometheus rules (`[a-zA-Z_:][a-zA-Z0-9_:]*`; counters end in
/// `_total`); a bad name or label, or a series registered twice, throws std::invalid_argument.
class metric_group {
public:
    metric_group() = default;
    metric_group(metric_group&& o) noexcept;
    metric_group& operator=(metric_group&& o) noexcept;
    ~metric_group();

    /// A counter owned by the component; `c` must outlive the group.
    metric_group& add_counter(const std::string& name, const std::string& help, const counter& c,
                              labels l = {});
    /// A counter read from the component's own stats when collected.
    metric_group& add_counter(const std::string& name, const std::string& help, reader read, labels l = {});
    /// A gauge owned by the component; `g` must outlive the group.
    metric_group& add_gauge(const std::string& name, const std::string& help, const gauge& g, labels l = {});
    /// A gauge read when collected.
    metric_group& add_gauge(const std::string& name, const std::string& help, reader read, labels l = {});
    /// A histogram owned by the component; `h` must outlive the group.
    metric_group& add_histogram(const std::string& name, const std::string& help, const histogram& h,
                                labels l = {});

    /// Unregisters everything now.
    void clear() noexcept;
    /// Series registered through this group.
    size_t size() const noexcept { return _ids.size(); }

private:
    std::vector<uint64_t> _ids;
    unsigned _shard = 0; // the shard of the registrations (set by the first one)
};

/// A counter published from a `uint64_t` field of a component's stats struct.
template <typename Stats>
struct stats_field {
    const char* name;
    const char* help;
    uint64_t Stats::*field;
};

/// Registers one counter per entry of `fields`, each read from `get()` (the calling shard's
/// struct) when collected: the component's hot path keeps its plain increments.
template <typename Stats, size_t N>
void add_stats_counters(metric_group& g, const stats_field<Stats> (&fields)[N], const Stats& (*get)()) {
    for (const auto& f : fields) {
        g.add_counter(f.name, f.help,
                      [get, field = f.field]() -> std::optional<double> { return double(get().*field); });
    }
}

/// Every metric registered on the calling shard, collected now, sorted by name.
std::vector<family> collect_local();

/// Collects every shard (one `submit_to` each) and merges families of the same name, the
/// series of shard 0 first. Call on any shard.
future<std::vector<family>> collect_all_shards();

/// Series registered on the calling shard (for tests).
size_t local_series_count() noexcept;

} // namespace shoal::metrics
