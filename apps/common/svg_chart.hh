#pragma once

#include <string>
#include <utility>
#include <vector>

namespace shoal::apps {

/// SVG charts for the benchmark apps, written without outside tools: line charts (shoal-rpc-bench)
/// and grouped bar charts (shoal-kv-bench).

/// One line of a chart: its label and its (x, y) points in x order.
struct series {
    std::string name;
    std::vector<std::pair<double, double>> points;
};

/// One panel of a chart.
struct panel {
    std::string title;
    std::string x_label;
    std::string y_label;
    std::vector<series> lines;
    bool log_x = true;
    bool log_y = true;
};

/// An SVG document with `panels` side by side (each 480x360), a shared legend taken from the
/// first panel's line names, and `title` on top. Log axes need positive values; points that are
/// not are left out.
std::string svg_chart(const std::string& title, const std::vector<panel>& panels);

/// One group of bars (a target) in a bar chart: a value per series.
struct bar_group {
    std::string label;
    std::vector<double> values;
};

/// A grouped bar chart as a standalone SVG document: `series` names the bars of each group
/// (legend), every group is drawn side by side against one linear axis from 0.
std::string svg_bar_chart(const std::string& title, const std::string& unit,
                          const std::vector<std::string>& series, const std::vector<bar_group>& groups);

} // namespace shoal::apps
