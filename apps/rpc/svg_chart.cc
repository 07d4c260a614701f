#include "apps/rpc/svg_chart.hh"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/core.h>

namespace shoal::rpc_bench {

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

} // namespace shoal::rpc_bench
