#include "apps/kv/bench_dist.hh"

#include "core/app.hh"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include <fmt/core.h>

namespace shoal::kv_app {

namespace {

/// log1p(x) / x, continuous at 0.
double log1p_over(double x) noexcept {
    return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1 - x * (1.0 / 2 - x * (1.0 / 3 - x * (1.0 / 4)));
}

/// expm1(x) / x, continuous at 0.
double expm1_over(double x) noexcept {
    return std::abs(x) > 1e-8 ? std::expm1(x) / x
                              : 1 + x * (1.0 / 2) * (1 + x * (1.0 / 3) * (1 + x * (1.0 / 4)));
}

/// The whole of `text` as a finite number, or nothing.
bool parse_number(std::string_view text, double& out) {
    std::string s(text);
    if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) {
        return false;
    }
    char* end = nullptr;
    errno = 0;
    out = std::strtod(s.c_str(), &end);
    return errno == 0 && end == s.c_str() + s.size() && std::isfinite(out);
}

/// A byte count with an optional K/M suffix; `what` names it in the error.
size_t parse_bytes(std::string_view text, std::string_view what) {
    if (!text.empty() && std::isdigit(static_cast<unsigned char>(text[0]))) {
        try {
            return size_t(parse_size(std::string(text)));
        } catch (const std::exception&) {
        }
    }
    throw std::invalid_argument(fmt::format("{}: '{}' is not a size (N, NK or NM)", what, text));
}

} // namespace

key_distribution key_distribution::uniform(uint64_t n) {
    if (n == 0) {
        throw std::invalid_argument("key space: at least one key");
    }
    key_distribution d;
    d._n = n;
    return d;
}

key_distribution key_distribution::zipf(uint64_t n, double s) {
    key_distribution d = uniform(n);
    if (!(s > 0 && s <= 10)) {
        throw std::invalid_argument(fmt::format("zipf exponent {}: expected 0 < s <= 10", s));
    }
    d._s = s;
    d._h_integral_x1 = d.h_integral(1.5) - 1;
    d._h_integral_n = d.h_integral(double(n) + 0.5);
    d._squeeze = 2 - d.h_integral_inverse(d.h_integral(2.5) - d.h(2));
    return d;
}

key_distribution key_distribution::parse(std::string_view spec, uint64_t n) {
    if (spec == "uniform") {
        return uniform(n);
    }
    if (spec.starts_with("zipf:")) {
        double s = 0;
        if (!parse_number(spec.substr(5), s) || !(s > 0 && s <= 10)) {
            throw std::invalid_argument(fmt::format(
                "--key-dist '{}': zipf's exponent must be a number in (0, 10], e.g. zipf:0.9", spec));
        }
        return zipf(n, s);
    }
    throw std::invalid_argument(
        fmt::format("--key-dist '{}': expected uniform or zipf:S (e.g. zipf:0.9)", spec));
}

// h(x) = x^-s; H(x) = ((x^(1-s)) - 1) / (1 - s) (log x when s = 1), written with expm1/log1p so
// that s near 1 loses no precision (Hörmann and Derflinger 1996; as in Apache Commons RNG).
double key_distribution::h(double x) const noexcept {
    return std::exp(-_s * std::log(x));
}

double key_distribution::h_integral(double x) const noexcept {
    double log_x = std::log(x);
    return expm1_over((1 - _s) * log_x) * log_x;
}

double key_distribution::h_integral_inverse(double x) const noexcept {
    double t = std::max(x * (1 - _s), -1.0);
    return std::exp(log1p_over(t) * x);
}

uint64_t key_distribution::operator()(std::mt19937_64& rng) const noexcept {
    if (_s == 0) {
        return rng() % _n;
    }
    for (;;) {
        // u uniform in (H(1.5) - 1, H(n + 0.5)]: the area under the hat function.
        double u = _h_integral_n + unit_interval(rng) * (_h_integral_x1 - _h_integral_n);
        double x = h_integral_inverse(u);
        double kf = std::floor(x + 0.5);
        uint64_t k = kf < 1 ? 1 : kf > double(_n) ? _n : uint64_t(kf);
        // Accept at once within the squeeze, else when u falls under the histogram bar of k.
        if (double(k) - x <= _squeeze || u >= h_integral(double(k) + 0.5) - h(double(k))) {
            return k - 1;
        }
    }
}

std::string key_distribution::describe() const {
    return _s > 0 ? fmt::format("zipf:{:g}", _s) : "uniform";
}

size_distribution size_distribution::parse(std::string_view spec) {
    size_distribution d;
    if (spec.find(':') != std::string_view::npos) {
        double total = 0;
        std::vector<double> weights;
        size_t pos = 0;
        while (pos <= spec.size()) {
            size_t comma = std::min(spec.find(',', pos), spec.size());
            std::string_view item = spec.substr(pos, comma - pos);
            pos = comma + 1;
            size_t colon = item.find(':');
            if (colon == std::string_view::npos) {
                throw std::invalid_argument(fmt::format(
                    "--value-size '{}': '{}' is not SIZE:WEIGHT (e.g. 100:0.5,1000:0.3,10000:0.2)", spec,
                    item));
            }
            double w = 0;
            if (!parse_number(item.substr(colon + 1), w) || w <= 0) {
                throw std::invalid_argument(fmt::format(
                    "--value-size '{}': the weight in '{}' must be a positive number", spec, item));
            }
            d._sizes.push_back(parse_bytes(item.substr(0, colon), fmt::format("--value-size '{}'", spec)));
            weights.push_back(w);
            total += w;
        }
        double sum = 0;
        for (double w : weights) {
            sum += w;
            d._cdf.push_back(sum / total);
        }
        d._cdf.back() = 1;
        d._min = *std::min_element(d._sizes.begin(), d._sizes.end());
        d._max = *std::max_element(d._sizes.begin(), d._sizes.end());
        return d;
    }
    std::string what = fmt::format("--value-size '{}'", spec);
    // A dash after the first character separates MIN-MAX.
    if (size_t dash = spec.find('-', 1); dash != std::string_view::npos) {
        d._min = parse_bytes(spec.substr(0, dash), what);
        d._max = parse_bytes(spec.substr(dash + 1), what);
        if (d._max < d._min) {
            throw std::invalid_argument(what + ": MIN-MAX wants MIN <= MAX");
        }
        return d;
    }
    d._min = d._max = parse_bytes(spec, what);
    return d;
}

size_t size_distribution::at(double u) const noexcept {
    if (!_sizes.empty()) {
        auto i = size_t(std::upper_bound(_cdf.begin(), _cdf.end(), u) - _cdf.begin());
        return _sizes[std::min(i, _sizes.size() - 1)];
    }
    return std::min(_max, _min + size_t(u * double(_max - _min + 1)));
}

double size_distribution::mean() const noexcept {
    if (_sizes.empty()) {
        return (double(_min) + double(_max)) / 2;
    }
    double m = 0, prev = 0;
    for (size_t i = 0; i < _sizes.size(); ++i) {
        m += double(_sizes[i]) * (_cdf[i] - prev);
        prev = _cdf[i];
    }
    return m;
}

std::string size_distribution::describe() const {
    if (_sizes.empty()) {
        return _min == _max ? fmt::format("{}", _min) : fmt::format("{}-{}", _min, _max);
    }
    std::string s;
    double prev = 0;
    for (size_t i = 0; i < _sizes.size(); ++i) {
        s += fmt::format("{}{}:{:g}", i ? "," : "", _sizes[i], _cdf[i] - prev);
        prev = _cdf[i];
    }
    return s;
}

key_values::key_values(size_distribution sizes, uint64_t seed)
    : _sizes(std::move(sizes))
    , _seed(seed) {
    static constexpr std::string_view alphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::mt19937_64 rng(seed);
    _pattern.resize(_sizes.max() + offsets);
    for (char& c : _pattern) {
        c = alphabet[rng() % alphabet.size()];
    }
}

uint64_t key_values::mix(uint64_t k) const noexcept {
    return splitmix64(k ^ splitmix64(_seed));
}

size_t key_values::offset_of(uint64_t k) const noexcept {
    return splitmix64(mix(k)) % offsets;
}

size_t key_values::size_of(uint64_t k) const noexcept {
    return _sizes.at(double(mix(k) >> 11) * 0x1.0p-53);
}

void key_values::append(std::string& out, uint64_t k, std::string_view key) const {
    size_t n = size_of(k);
    if (n <= key.size()) {
        out.append(key.substr(0, n));
        return;
    }
    out.append(key);
    out += '|';
    out.append(_pattern, offset_of(k), n - key.size() - 1);
}

bool key_values::matches(uint64_t k, std::string_view key, std::string_view data) const noexcept {
    size_t n = size_of(k);
    if (data.size() != n) {
        return false;
    }
    if (n <= key.size()) {
        return data == key.substr(0, n);
    }
    return data.substr(0, key.size()) == key && data[key.size()] == '|' &&
           data.substr(key.size() + 1) == std::string_view(_pattern).substr(offset_of(k), n - key.size() - 1);
}

} // namespace shoal::kv_app
