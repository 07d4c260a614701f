#pragma once

#include "core/metrics.hh"

#include <string>
#include <vector>

namespace shoal::metrics {

/// Renders collected families in the Prometheus text exposition format (version 0.0.4): a
/// `# HELP` and a `# TYPE` line per family, then one line per series; histograms become
/// cumulative `_bucket{le="..."}` series ending with `le="+Inf"`, plus `_sum` and `_count`.
/// HELP text and label values are escaped as the format requires.
std::string format_prometheus(const std::vector<family>& families);

/// The Content-Type of `format_prometheus`'s output.
inline constexpr const char* prometheus_content_type = "text/plain; version=0.0.4; charset=utf-8";

} // namespace shoal::metrics
