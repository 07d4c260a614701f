#include "apps/common/options.hh"

#include <stdexcept>

namespace shoal::apps {

std::vector<std::string> split(const std::string& text, char sep) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos <= text.size()) {
        size_t next = text.find(sep, pos);
        if (next == std::string::npos) {
            next = text.size();
        }
        if (next > pos) {
            out.push_back(text.substr(pos, next - pos));
        }
        pos = next + 1;
    }
    return out;
}

std::chrono::duration<double> seconds_of(const app& a, const std::string& name) {
    const std::string text = a.get(name);
    size_t used = 0;
    double v = -1;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception&) {
    }
    if (v < 0 || used != text.size()) {
        throw std::invalid_argument("--" + name + " '" + text + "': expected a number of seconds");
    }
    return std::chrono::duration<double>(v);
}

uint16_t port_of(const app& a) {
    uint64_t p = a.get_size("port");
    if (p > 65535) {
        throw std::invalid_argument("--port " + a.get("port") + ": a port is 0..65535");
    }
    return uint16_t(p);
}

} // namespace shoal::apps
