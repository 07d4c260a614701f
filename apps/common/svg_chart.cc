#include "apps/common/svg_chart.hh"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include <fmt/core.h>

namespace shoal::apps {

namespace {

constexpr double panel_w = 480, panel_h = 360;
constexpr double margin_l = 70, margin_r = 20, margin_t = 40, margin_b = 50;
const char* const colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                              "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

/// Maps data values to pixels on one axis (linear or log10).
struct axis {
    double lo = 0, hi = 1;
    bool log = false;
    double from = 0, to = 1; // pixels

    double value(double v) const { return log ? std::log10(v) : v; }
    double pixel(double v) const {
        double t = hi > lo ? (value(v) - lo) / (hi - lo) : 0.5;
        return from + t * (to - from);
    }
    /// Tick values: powers of ten (log) or five even steps (linear).
    std::vector<double> ticks() const {
        std::vector<double> out;
        if (log) {
            for (double e = std::floor(lo); e <= std::ceil(hi); e += 1) {
                if (e >= lo - 1e-9 && e <= hi + 1e-9) {
                    out.push_back(std::pow(10, e));
                }
            }
            if (out.size() < 2) {
                out = {std::pow(10, lo), std::pow(10, hi)};
            }
        } else {
            for (int i = 0; i <= 5; ++i) {
                out.push_back(lo + (hi - lo) * i / 5);
            }
        }
        return out;
    }
};

std::string number(double v) {
    if (v >= 1e6) {
        return fmt::format("{:g}M", v / 1e6);
    }
    if (v >= 1e3) {
        return fmt::format("{:g}K", v / 1e3);
    }
    return fmt::format("{:.3g}", v);
}

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

bool usable(double v, bool log) {
    return std::isfinite(v) && (!log || v > 0);
}

axis make_axis(const std::vector<series>& lines, bool use_x, bool log, double from, double to) {
    double lo = std::numeric_limits<double>::max(), hi = std::numeric_limits<double>::lowest();
    for (const auto& s : lines) {
        for (auto [x, y] : s.points) {
            double v = use_x ? x : y;
            if (usable(x, log) && usable(y, log) && usable(v, log)) {
                lo = std::min(lo, log ? std::log10(v) : v);
                hi = std::max(hi, log ? std::log10(v) : v);
            }
        }
    }
    if (lo > hi) {
        lo = 0;
        hi = 1;
    }
    if (log) {
        lo = std::floor(lo);
        hi = std::max(std::ceil(hi), lo + 1);
    } else {
        lo = std::min(lo, 0.0);
        hi = hi > lo ? hi * 1.05 : lo + 1;
    }
    return axis{lo, hi, log, from, to};
}

std::string draw_panel(const panel& p, double ox) {
    std::string out = fmt::format("<g transform=\"translate({},40)\">\n", ox);
    axis x = make_axis(p.lines, true, p.log_x, margin_l, panel_w - margin_r);
    axis y = make_axis(p.lines, false, p.log_y, panel_h - margin_b, margin_t);
    out += fmt::format("<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-weight=\"bold\">{}</text>\n",
                       panel_w / 2, escape(p.title));
    for (double t : x.ticks()) {
        double px = x.pixel(t);
        out += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ddd\"/>\n",
                           px, margin_t, panel_h - margin_b);
        out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px,
                           panel_h - margin_b + 16, number(t));
    }
    for (double t : y.ticks()) {
        double py = y.pixel(t);
        out += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>\n",
                           margin_l, py, panel_w - margin_r);
        out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", margin_l - 6,
                           py + 4, number(t));
    }
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n",
                       margin_l, margin_t, panel_w - margin_l - margin_r, panel_h - margin_t - margin_b);
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", panel_w / 2,
                       panel_h - 12, escape(p.x_label));
    out += fmt::format("<text transform=\"translate(16,{}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                       panel_h / 2, escape(p.y_label));
    for (size_t i = 0; i < p.lines.size(); ++i) {
        const char* color = colors[i % std::size(colors)];
        std::string pts;
        for (auto [vx, vy] : p.lines[i].points) {
            if (usable(vx, p.log_x) && usable(vy, p.log_y)) {
                pts += fmt::format("{:.1f},{:.1f} ", x.pixel(vx), y.pixel(vy));
                out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", x.pixel(vx),
                                   y.pixel(vy), color);
            }
        }
        out += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", pts,
                           color);
    }
    return out + "</g>\n";
}

} // namespace

std::string svg_chart(const std::string& title, const std::vector<panel>& panels) {
    double width = panel_w * double(std::max<size_t>(panels.size(), 1));
    double height = panel_h + 80;
    std::string out = fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
                                  "font-family=\"sans-serif\" font-size=\"12\">\n",
                                  width, height);
    out += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"white\"/>\n", width, height);
    out += fmt::format("<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">{}</text>\n",
                       width / 2, escape(title));
    for (size_t i = 0; i < panels.size(); ++i) {
        out += draw_panel(panels[i], panel_w * double(i));
    }
    if (!panels.empty()) {
        double lx = 20;
        for (size_t i = 0; i < panels[0].lines.size(); ++i) {
            const char* color = colors[i % std::size(colors)];
            out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"4\" fill=\"{}\"/>\n", lx,
                               height - 22, color);
            out += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", lx + 18, height - 16,
                               escape(panels[0].lines[i].name));
            lx += 90;
        }
    }
    return out + "</svg>\n";
}

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
                             x0 + bar_w * double(i), top + plot_h - h, bar_w - 2, h,
                             colors[i % std::size(colors)], escape(series[i]), groups[g].values[i]);
        }
        s += fmt::format("<text x=\"{:.1f}\" y=\"{:.0f}\" text-anchor=\"middle\">{}</text>\n",
                         x0 + bar_w * double(series.size()) / 2, top + plot_h + 18, escape(groups[g].label));
    }
    for (size_t i = 0; i < series.size(); ++i) {
        double y = top + 14 + 18 * double(i);
        s += fmt::format("<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"12\" height=\"12\" fill=\"{}\"/>",
                         width - 150, y - 10, colors[i % std::size(colors)]);
        s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\">{}</text>\n", width - 132, y, escape(series[i]));
    }
    s += "</svg>\n";
    return s;
}

} // namespace shoal::apps
