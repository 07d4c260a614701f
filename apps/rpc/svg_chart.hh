#pragma once

#include <string>
#include <utility>
#include <vector>

namespace shoal::rpc_bench {

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

} // namespace shoal::rpc_bench
