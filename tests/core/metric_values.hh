#pragma once

// Test helper: the calling shard's metrics as a flat map, for tests that check a value moved.

#include "core/metrics.hh"

#include <map>
#include <string>

namespace shoal::testing {

/// Every series collected on the calling shard, by name. A series with labels besides `shard`
/// also appears as `name{label=value}` (its last label); a histogram as `name_count` and
/// `name_sum`.
inline std::map<std::string, double> metric_values() {
    std::map<std::string, double> out;
    for (const auto& f : metrics::collect_local()) {
        for (const auto& s : f.samples) {
            if (f.type == metrics::kind::histogram) {
                out[f.name + "_count"] = double(s.distribution.count);
                out[f.name + "_sum"] = s.distribution.sum;
                continue;
            }
            out[f.name] = s.value;
            if (s.series_labels.size() > 1) {
                const auto& l = s.series_labels.back();
                out[f.name + "{" + l.name + "=" + l.value + "}"] = s.value;
            }
        }
    }
    return out;
}

} // namespace shoal::testing
