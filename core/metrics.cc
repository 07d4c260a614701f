#include "core/metrics.hh"

#include "core/future_util.hh"
#include "core/log.hh"
#include "core/smp.hh"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>
#include <variant>

namespace shoal::metrics {

namespace {

/// One registered series on this shard.
struct entry {
    std::string name;
    std::string help;
    kind type;
    labels series_labels; // `shard` first
    std::variant<const counter*, const gauge*, const histogram*, reader> source;
};

/// The calling shard's registry: series by id (ids grow, so the map keeps registration order).
struct registry {
    std::map<uint64_t, entry> entries;
    uint64_t next_id = 1;
};

thread_local registry tl_registry;
logger metrics_log("metrics");

bool valid_name(const std::string& s, bool colon_ok) {
    if (s.empty()) {
        return false;
    }
    for (size_t i = 0; i < s.size(); ++i) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':') ||
                  (i > 0 && c >= '0' && c <= '9');
        if (!ok) {
            return false;
        }
    }
    return true;
}

bool ends_with(const std::string& s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Checks `e` against the rules and the series already registered; throws std::invalid_argument.
void validate(const registry& r, const entry& e) {
    if (!valid_name(e.name, true)) {
        throw std::invalid_argument("metric name '" + e.name + "' is not [a-zA-Z_:][a-zA-Z0-9_:]*");
    }
    if (e.type == kind::counter && !ends_with(e.name, "_total")) {
        throw std::invalid_argument("counter '" + e.name + "' must end in _total");
    }
    if (e.type != kind::counter && ends_with(e.name, "_total")) {
        throw std::invalid_argument("metric '" + e.name + "' ends in _total but is not a counter");
    }
    for (std::string_view reserved : {"_bucket", "_sum", "_count"}) {
        if (ends_with(e.name, reserved)) {
            throw std::invalid_argument("metric name '" + e.name + "' ends in " + std::string(reserved) +
                                        ", which histograms reserve");
        }
    }
    if (e.help.empty() || e.help.find('\n') != std::string::npos) {
        throw std::invalid_argument("metric '" + e.name + "' needs a one-line description");
    }
    for (size_t i = 1; i < e.series_labels.size(); ++i) { // [0] is the registry's `shard`
        const std::string& n = e.series_labels[i].name;
        if (!valid_name(n, false) || n.starts_with("__")) {
            throw std::invalid_argument("metric '" + e.name + "': bad label name '" + n + "'");
        }
        if (n == "shard" || (e.type == kind::histogram && n == "le")) {
            throw std::invalid_argument("metric '" + e.name + "': label '" + n + "' is reserved");
        }
        for (size_t j = 1; j < i; ++j) {
            if (e.series_labels[j].name == n) {
                throw std::invalid_argument("metric '" + e.name + "': label '" + n + "' given twice");
            }
        }
    }
    for (const auto& [id, other] : r.entries) {
        if (other.name != e.name) {
            continue;
        }
        if (other.type != e.type || other.help != e.help) {
            throw std::invalid_argument("metric '" + e.name +
                                        "' registered again with another type or description");
        }
        auto sorted = [](labels l) {
            std::sort(l.begin(), l.end(), [](const label& a, const label& b) { return a.name < b.name; });
            return l;
        };
        if (sorted(other.series_labels) == sorted(e.series_labels)) {
            throw std::invalid_argument("metric '" + e.name + "' registered twice with the same labels");
        }
    }
}

/// The value of a counter or gauge entry; nothing when its reader has none.
std::optional<double> read_scalar(const entry& e) {
    if (auto c = std::get_if<const counter*>(&e.source)) {
        return double((*c)->value());
    }
    if (auto g = std::get_if<const gauge*>(&e.source)) {
        return (*g)->value();
    }
    return std::get<reader>(e.source)();
}

histogram_value read_histogram(const histogram& h) {
    histogram_value v;
    v.bounds = h.bounds();
    v.cumulative.reserve(h.buckets().size());
    uint64_t running = 0;
    for (uint64_t b : h.buckets()) {
        running += b;
        v.cumulative.push_back(running);
    }
    v.sum = h.sum();
    v.count = h.count();
    return v;
}

} // namespace

histogram::histogram(std::vector<double> upper_bounds)
    : _bounds(std::move(upper_bounds)) {
    if (_bounds.empty() || _bounds.size() > 64) {
        throw std::invalid_argument("histogram: between 1 and 64 bucket bounds, got " +
                                    std::to_string(_bounds.size()));
    }
    for (size_t i = 0; i < _bounds.size(); ++i) {
        if (!std::isfinite(_bounds[i]) || (i > 0 && !(_bounds[i] > _bounds[i - 1]))) {
            throw std::invalid_argument("histogram: bucket bounds must be finite and strictly increasing");
        }
    }
    _buckets.assign(_bounds.size() + 1, 0);
    if (_bounds[0] > 0) {
        _inv_start = 1 / _bounds[0];
        _pow2 = true;
        for (size_t i = 1; i < _bounds.size(); ++i) {
            _pow2 = _pow2 && _bounds[i] == _bounds[i - 1] * 2;
        }
    }
}

histogram histogram::exponential(double start, double factor, unsigned count) {
    if (!(start > 0) || !(factor > 1)) {
        throw std::invalid_argument("histogram::exponential: wants start > 0 and factor > 1");
    }
    std::vector<double> b;
    double v = start;
    for (unsigned i = 0; i < count; ++i, v *= factor) {
        b.push_back(v);
    }
    return histogram(std::move(b));
}

metric_group::metric_group(metric_group&& o) noexcept
    : _ids(std::exchange(o._ids, {}))
    , _shard(o._shard) {}

metric_group& metric_group::operator=(metric_group&& o) noexcept {
    if (this != &o) {
        clear();
        _ids = std::exchange(o._ids, {});
        _shard = o._shard;
    }
    return *this;
}

metric_group::~metric_group() {
    clear();
}

void metric_group::clear() noexcept {
    if (!_ids.empty() && this_shard_id() != _shard) {
        // Another shard's registry: touching it would race with that shard.
        metrics_log.error("metric group of shard {} dropped on shard {}: its {} series stay registered",
                          _shard, this_shard_id(), _ids.size());
        _ids.clear();
        return;
    }
    for (uint64_t id : _ids) {
        tl_registry.entries.erase(id);
    }
    _ids.clear();
}

namespace {

/// Registers a series on the calling shard and records its id in `ids` (room is made first, so
/// a failure leaves nothing registered).
void add_entry(std::vector<uint64_t>& ids, unsigned& shard, const std::string& name, const std::string& help,
               kind type, labels l,
               std::variant<const counter*, const gauge*, const histogram*, reader> source) {
    if (ids.empty()) {
        shard = this_shard_id();
    } else if (shard != this_shard_id()) {
        throw std::logic_error("metric '" + name + "': a metric group registers on one shard only (shard " +
                               std::to_string(shard) + ")");
    }
    entry e{name, help, type, {}, std::move(source)};
    e.series_labels.reserve(l.size() + 1);
    e.series_labels.push_back({"shard", std::to_string(this_shard_id())});
    for (auto& x : l) {
        e.series_labels.push_back(std::move(x));
    }
    validate(tl_registry, e);
    ids.reserve(ids.size() + 1);
    uint64_t id = tl_registry.next_id++;
    tl_registry.entries.emplace(id, std::move(e));
    ids.push_back(id);
}

} // namespace

metric_group& metric_group::add_counter(const std::string& name, const std::string& help, const counter& c,
                                        labels l) {
    add_entry(_ids, _shard, name, help, kind::counter, std::move(l), &c);
    return *this;
}

metric_group& metric_group::add_counter(const std::string& name, const std::string& help, reader read,
                                        labels l) {
    add_entry(_ids, _shard, name, help, kind::counter, std::move(l), std::move(read));
    return *this;
}

metric_group& metric_group::add_gauge(const std::string& name, const std::string& help, const gauge& g,
                                      labels l) {
    add_entry(_ids, _shard, name, help, kind::gauge, std::move(l), &g);
    return *this;
}

metric_group& metric_group::add_gauge(const std::string& name, const std::string& help, reader read,
                                      labels l) {
    add_entry(_ids, _shard, name, help, kind::gauge, std::move(l), std::move(read));
    return *this;
}

metric_group& metric_group::add_histogram(const std::string& name, const std::string& help,
                                          const histogram& h, labels l) {
    add_entry(_ids, _shard, name, help, kind::histogram, std::move(l), &h);
    return *this;
}

std::vector<family> collect_local() {
    std::map<std::string, family> by_name;
    for (const auto& [id, e] : tl_registry.entries) {
        sample s;
        if (e.type == kind::histogram) {
            s.distribution = read_histogram(*std::get<const histogram*>(e.source));
        } else {
            std::optional<double> v = read_scalar(e);
            if (!v) {
                continue;
            }
            s.value = *v;
        }
        s.series_labels = e.series_labels;
        family& f = by_name[e.name];
        if (f.name.empty()) {
            f.name = e.name;
            f.help = e.help;
            f.type = e.type;
        }
        f.samples.push_back(std::move(s));
    }
    std::vector<family> out;
    out.reserve(by_name.size());
    for (auto& [name, f] : by_name) {
        out.push_back(std::move(f));
    }
    return out;
}

future<std::vector<family>> collect_all_shards() {
    std::vector<future<std::vector<family>>> parts;
    for (unsigned s = 0; s < shard_count(); ++s) {
        parts.push_back(submit_to(s, [] { return collect_local(); }));
    }
    return when_all_succeed(std::move(parts)).then([](std::vector<std::vector<family>> per_shard) {
        std::map<std::string, family> by_name;
        for (auto& shard_families : per_shard) {
            for (auto& f : shard_families) {
                family& into = by_name[f.name];
                if (into.name.empty()) {
                    into.name = f.name;
                    into.help = f.help;
                    into.type = f.type;
                }
                for (auto& s : f.samples) {
                    into.samples.push_back(std::move(s));
                }
            }
        }
        std::vector<family> out;
        out.reserve(by_name.size());
        for (auto& [name, f] : by_name) {
            out.push_back(std::move(f));
        }
        return out;
    });
}

size_t local_series_count() noexcept {
    return tl_registry.entries.size();
}

} // namespace shoal::metrics
