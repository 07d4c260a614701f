#include "apps/kv/svg_chart.hh"

#include <algorithm>

#include <fmt/core.h>

namespace shoal::kv_app {

namespace {

std::string escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '&':
            out += "&amp;";
            break;
        default:
            out += c;
        }
    }
    return out;
}

constexpr const char* colors[] = {"#4878a8", "#e49444", "#6a9f58", "#d1605e", "#85b6b2", "#967662"};

} // namespace

std::string svg_bar_chart(const std::string& title, const std::string& unit,
                          const std::vector<std::string>& series, const std::vector<bar_group>& groups) {
    const double left = 70, top = 40, plot_h = 220, bar_w = 28, gap = 30;
    double max = 0;
    for (const auto& g : groups) {
        for (double v : g.values) {
            max = std::max(max, v);
        }
    }
    max = max > 0 ? max * 1.1 : 1;
    double group_w = bar_w * double(series.size()) + gap;
    double width = left + group_w * double(groups.size()) + 160;
    double height = top + plot_h + 50;
    std::string s =
        fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
                    "font-family=\"sans-serif\" font-size=\"12\">\n",
                    width, height);
    s += fmt::format("<text x=\"{}\" y=\"20\" font-size=\"14\">{}</text>\n", left, escape(title));
    for (int i = 0; i <= 4; ++i) {
        double v = max * i / 4;
        double y = top + plot_h - plot_h * i / 4;
        s += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n",
                         left, y, width - 160, y);
        s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.3g}</text>\n", left - 6, y + 4,
                         v);
    }
    s += fmt::format("<text x=\"12\" y=\"{:.0f}\" transform=\"rotate(-90 12 {:.0f})\">{}</text>\n",
                     top + plot_h / 2, top + plot_h / 2, escape(unit));
    for (size_t g = 0; g < groups.size(); ++g) {
        double x0 = left + gap / 2 + group_w * double(g);
        for (size_t i = 0; i < groups[g].values.size() && i < series.size(); ++i) {
            double h = plot_h * groups[g].values[i] / max;
            s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{}\" height=\"{:.1f}\" fill=\"{}\">"
                             "<title>{}: {:.4g}</title></rect>\n",
                             x0 + bar_w * double(i), top + plot_h - h, bar_w - 2, h, colors[i % 6],
                             escape(series[i]), groups[g].values[i]);
        }
        s += fmt::format("<text x=\"{:.1f}\" y=\"{:.0f}\" text-anchor=\"middle\">{}</text>\n",
                         x0 + bar_w * double(series.size()) / 2, top + plot_h + 18, escape(groups[g].label));
    }
    for (size_t i = 0; i < series.size(); ++i) {
        double y = top + 14 + 18 * double(i);
        s += fmt::format("<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"12\" height=\"12\" fill=\"{}\"/>",
                         width - 150, y - 10, colors[i % 6]);
        s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\">{}</text>\n", width - 132, y, escape(series[i]));
    }
    s += "</svg>\n";
    return s;
}

} // namespace shoal::kv_app
