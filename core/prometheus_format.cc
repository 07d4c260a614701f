#include "core/prometheus_format.hh"

#include <cmath>

#include <fmt/format.h>

namespace shoal::metrics {

namespace {

/// A sample value as Prometheus parses it (Go's ParseFloat plus +Inf, -Inf and NaN).
void append_number(std::string& out, double v) {
    if (std::isnan(v)) {
        out += "NaN";
    } else if (std::isinf(v)) {
        out += v > 0 ? "+Inf" : "-Inf";
    } else if (v == std::floor(v) && std::fabs(v) < 1e15) {
        fmt::format_to(std::back_inserter(out), "{}", int64_t(v));
    } else {
        fmt::format_to(std::back_inserter(out), "{}", v);
    }
}

/// Escapes `\` and newlines (HELP), and `"` too in label values.
void append_escaped(std::string& out, const std::string& s, bool quote) {
    for (char c : s) {
        if (c == '\\') {
            out += "\\\\";
        } else if (c == '\n') {
            out += "\\n";
        } else if (quote && c == '"') {
            out += "\\\"";
        } else {
            out += c;
        }
    }
}

/// `{a="x",b="y"}`, with an extra `le` label when given.
void append_labels(std::string& out, const labels& l, const std::string* le = nullptr) {
    if (l.empty() && !le) {
        return;
    }
    out += '{';
    bool first = true;
    for (const auto& x : l) {
        if (!first) {
            out += ',';
        }
        first = false;
        out += x.name;
        out += "=\"";
        append_escaped(out, x.value, true);
        out += '"';
    }
    if (le) {
        if (!first) {
            out += ',';
        }
        out += "le=\"";
        out += *le;
        out += '"';
    }
    out += '}';
}

const char* type_name(kind k) {
    switch (k) {
    case kind::counter:
        return "counter";
    case kind::gauge:
        return "gauge";
    case kind::histogram:
        return "histogram";
    }
    return "untyped";
}

} // namespace

std::string format_prometheus(const std::vector<family>& families) {
    std::string out;
    for (const auto& f : families) {
        out += "# HELP ";
        out += f.name;
        out += ' ';
        append_escaped(out, f.help, false);
        out += "\n# TYPE ";
        out += f.name;
        out += ' ';
        out += type_name(f.type);
        out += '\n';
        for (const auto& s : f.samples) {
            if (f.type != kind::histogram) {
                out += f.name;
                append_labels(out, s.series_labels);
                out += ' ';
                append_number(out, s.value);
                out += '\n';
                continue;
            }
            const histogram_value& h = s.distribution;
            for (size_t i = 0; i < h.cumulative.size(); ++i) {
                std::string le;
                if (i < h.bounds.size()) {
                    append_number(le, h.bounds[i]);
                } else {
                    le = "+Inf";
                }
                out += f.name;
                out += "_bucket";
                append_labels(out, s.series_labels, &le);
                out += ' ';
                append_number(out, double(h.cumulative[i]));
                out += '\n';
            }
            out += f.name;
            out += "_sum";
            append_labels(out, s.series_labels);
            out += ' ';
            append_number(out, h.sum);
            out += '\n';
            out += f.name;
            out += "_count";
            append_labels(out, s.series_labels);
            out += ' ';
            append_number(out, double(h.count));
            out += '\n';
        }
    }
    return out;
}

} // namespace shoal::metrics
