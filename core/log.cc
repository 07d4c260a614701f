#include "core/log.hh"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace shoal {

unsigned this_shard_id() noexcept;

namespace {
/// The registry of loggers. Loggers are created during static initialisation and levels are
/// set at start-up, so a mutex (never on a logging path) is enough.
struct registry {
    std::mutex lock;
    std::vector<logger*> loggers;
    log_level default_level = log_level::info;
};
registry& reg() {
    static registry r;
    return r;
}
} // namespace

log_level parse_log_level(std::string_view name) {
    if (name == "error") {
        return log_level::error;
    }
    if (name == "warn" || name == "warning") {
        return log_level::warn;
    }
    if (name == "info") {
        return log_level::info;
    }
    if (name == "debug") {
        return log_level::debug;
    }
    if (name == "trace") {
        return log_level::trace;
    }
    throw std::invalid_argument(
        fmt::format("unknown log level '{}' (error, warn, info, debug, trace)", name));
}

std::string_view to_string(log_level l) noexcept {
    switch (l) {
    case log_level::error:
        return "ERROR";
    case log_level::warn:
        return "WARN ";
    case log_level::info:
        return "INFO ";
    case log_level::debug:
        return "DEBUG";
    case log_level::trace:
        return "TRACE";
    }
    return "?";
}

logger::logger(std::string name)
    : _name(std::move(name)) {
    auto& r = reg();
    std::lock_guard g(r.lock);
    _level = r.default_level;
    r.loggers.push_back(this);
}

logger::~logger() {
    auto& r = reg();
    std::lock_guard g(r.lock);
    r.loggers.erase(std::remove(r.loggers.begin(), r.loggers.end(), this), r.loggers.end());
}

void logger::write(log_level l, const std::string& message) {
    // One fwrite per line keeps lines from different shards whole.
    std::string line = fmt::format("{} shard {} {} - {}\n", to_string(l), this_shard_id(), _name, message);
    std::fwrite(line.data(), 1, line.size(), stderr);
}

void logging::set_default_level(log_level l) {
    auto& r = reg();
    std::lock_guard g(r.lock);
    r.default_level = l;
    for (logger* lg : r.loggers) {
        lg->set_level(l);
    }
}

bool logging::set_level(std::string_view name, log_level l) {
    auto& r = reg();
    std::lock_guard g(r.lock);
    bool found = false;
    for (logger* lg : r.loggers) {
        if (lg->name() == name) {
            lg->set_level(l);
            found = true;
        }
    }
    return found;
}

void logging::apply_levels(std::string_view spec) {
    while (!spec.empty()) {
        size_t comma = spec.find_first_of(",:");
        std::string_view item = spec.substr(0, comma);
        spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
        if (item.empty()) {
            continue;
        }
        size_t eq = item.find('=');
        if (eq == std::string_view::npos) {
            throw std::invalid_argument(fmt::format("bad logger level '{}': expected name=level", item));
        }
        auto name = item.substr(0, eq);
        auto level = parse_log_level(item.substr(eq + 1));
        if (!set_level(name, level)) {
            throw std::invalid_argument(fmt::format("no logger called '{}'", name));
        }
    }
}

} // namespace shoal
