#pragma once

#include <string>
#include <vector>

namespace shoal::kv_app {

/// One group of bars (a target) in a chart: a value per series.
struct bar_group {
    std::string label;
    std::vector<double> values;
};

/// A grouped bar chart as a standalone SVG document: `series` names the bars of each group
/// (legend), every group is drawn side by side against one linear axis from 0.
std::string svg_bar_chart(const std::string& title, const std::string& unit,
                          const std::vector<std::string>& series, const std::vector<bar_group>& groups);

} // namespace shoal::kv_app
