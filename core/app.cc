#include "core/app.hh"

#include "core/log.hh"

#include <cstdio>
#include <stdexcept>

#include <fmt/format.h>

namespace shoal {

std::vector<unsigned> parse_cpuset(const std::string& text) {
    std::vector<unsigned> cpus;
    size_t pos = 0;
    auto number = [&](size_t& p) {
        size_t start = p;
        unsigned v = 0;
        while (p < text.size() && text[p] >= '0' && text[p] <= '9') {
            v = v * 10 + unsigned(text[p] - '0');
            if (v > 4096) {
                throw std::invalid_argument("cpuset '" + text + "': CPU number too large");
            }
            ++p;
        }
        if (p == start) {
            throw std::invalid_argument("cpuset '" + text + "': expected a CPU number at offset " +
                                        std::to_string(start));
        }
        return v;
    };
    while (pos < text.size()) {
        unsigned first = number(pos);
        unsigned last = first;
        if (pos < text.size() && text[pos] == '-') {
            ++pos;
            last = number(pos);
            if (last < first) {
                throw std::invalid_argument("cpuset '" + text + "': range goes backwards");
            }
        }
        for (unsigned c = first; c <= last; ++c) {
            cpus.push_back(c);
        }
        if (pos < text.size()) {
            if (text[pos] != ',') {
                throw std::invalid_argument("cpuset '" + text + "': expected ',' at offset " +
                                            std::to_string(pos));
            }
            ++pos;
        }
    }
    if (cpus.empty()) {
        throw std::invalid_argument("empty cpuset");
    }
    return cpus;
}

uint64_t parse_size(const std::string& text) {
    size_t used = 0;
    uint64_t v = 0;
    try {
        v = std::stoull(text, &used);
    } catch (const std::exception&) {
        throw std::invalid_argument("'" + text + "' is not a number");
    }
    std::string suffix = text.substr(used);
    if (suffix.empty()) {
        return v;
    }
    if (suffix == "K" || suffix == "k" || suffix == "KB" || suffix == "KiB") {
        return v << 10;
    }
    if (suffix == "M" || suffix == "m" || suffix == "MB" || suffix == "MiB") {
        return v << 20;
    }
    if (suffix == "G" || suffix == "g" || suffix == "GB" || suffix == "GiB") {
        return v << 30;
    }
    throw std::invalid_argument("'" + text + "': unknown size suffix '" + suffix + "'");
}

namespace {
/// Parses a non-negative number of milliseconds ("0.5", "2") into microseconds.
std::chrono::microseconds parse_milliseconds(const std::string& option, const std::string& text) {
    size_t used = 0;
    double ms = -1;
    try {
        ms = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != text.size() || text.empty() || !(ms >= 0) || ms > 1e6) {
        throw std::invalid_argument("--" + option + ": '" + text + "' is not a number of milliseconds");
    }
    return std::chrono::microseconds(int64_t(ms * 1000));
}
} // namespace

app::app(std::string name, std::string description)
    : _name(std::move(name))
    , _description(std::move(description)) {
    add_option("smp", "number of shards (threads), one per CPU of --cpuset", "1");
    add_option("cpuset", "CPUs to pin the shards to, e.g. 0-3,6");
    add_flag("poll-mode", "never sleep: poll continuously even when idle");
    add_option("idle-poll-us", "microseconds an idle shard keeps polling before it sleeps", "200");
    add_option("task-quota", "tasks a shard runs between two polls", "256");
    add_option("task-quota-ms", "time a shard runs tasks before it polls (need_preempt); 0: no limit", "0.5");
    add_option("log-level", "error, warn, info, debug or trace", "info");
    add_option("logger-log-level", "per-logger levels, e.g. reactor=debug,tcp=trace");
    add_flag("no-pin", "do not pin shards to CPUs");
    add_flag("no-defer-taskrun",
             "do not ask io_uring for DEFER_TASKRUN: use COOP_TASKRUN, as on kernels before 6.1");
    add_flag("help", "show this help");
}

app& app::add_option(std::string name, std::string help, std::string default_value) {
    if (!_options.count(name)) {
        _order.push_back(name);
    }
    _options[name] = option{std::move(help), default_value, false, false, default_value};
    return *this;
}

app& app::add_flag(std::string name, std::string help) {
    if (!_options.count(name)) {
        _order.push_back(name);
    }
    _options[name] = option{std::move(help), {}, true, false};
    return *this;
}

const std::string& app::get(const std::string& name) const {
    auto it = _options.find(name);
    if (it == _options.end()) {
        throw std::invalid_argument("no option --" + name);
    }
    return it->second.value;
}

uint64_t app::get_size(const std::string& name) const {
    return parse_size(get(name));
}

bool app::has(const std::string& name) const {
    auto it = _options.find(name);
    if (it == _options.end()) {
        return false;
    }
    return it->second.is_flag ? it->second.given : !it->second.value.empty();
}

std::string app::usage() const {
    std::string out = fmt::format("{} - {}\n\nOptions:\n", _name, _description);
    for (const auto& name : _order) {
        const auto& o = _options.at(name);
        std::string left = o.is_flag ? "--" + name : "--" + name + " VALUE";
        std::string def =
            (!o.is_flag && !o.default_value.empty()) ? fmt::format(" (default {})", o.default_value) : "";
        out += fmt::format("  {:<28} {}{}\n", left, o.help, def);
    }
    return out;
}

std::optional<int> app::parse(int argc, char** argv) {
    try {
        for (int i = 1; i < argc; ++i) {
            std::string arg = argv[i];
            if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
                _positional.push_back(arg);
                continue;
            }
            std::string name = arg.substr(2);
            std::optional<std::string> value;
            if (auto eq = name.find('='); eq != std::string::npos) {
                value = name.substr(eq + 1);
                name = name.substr(0, eq);
            }
            auto it = _options.find(name);
            if (it == _options.end()) {
                throw std::invalid_argument("unknown option --" + name);
            }
            auto& o = it->second;
            o.given = true;
            if (o.is_flag) {
                if (value) {
                    throw std::invalid_argument("--" + name + " takes no value");
                }
                continue;
            }
            if (!value) {
                if (i + 1 >= argc) {
                    throw std::invalid_argument("--" + name + " needs a value");
                }
                value = argv[++i];
            }
            o.value = *value;
        }
        if (has("help")) {
            std::fputs(usage().c_str(), stdout);
            return 0;
        }
        apply_common();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n(see --help)\n", _name.c_str(), e.what());
        return 2;
    }
    return std::nullopt;
}

void app::apply_common() {
    _smp.smp = unsigned(parse_size(get("smp")));
    if (has("cpuset")) {
        _smp.cpuset = parse_cpuset(get("cpuset"));
        if (!_options["smp"].given) {
            _smp.smp = unsigned(_smp.cpuset.size());
        }
    }
    if (_smp.smp == 0) {
        throw std::invalid_argument("--smp must be at least 1");
    }
    _smp.pin = !has("no-pin");
    _smp.handle_signals = true;
    _smp.reactor.poll_mode = has("poll-mode");
    _smp.reactor.defer_taskrun = !has("no-defer-taskrun");
    _smp.reactor.idle_poll = std::chrono::microseconds(parse_size(get("idle-poll-us")));
    _smp.reactor.task_quota = unsigned(parse_size(get("task-quota")));
    if (_smp.reactor.task_quota == 0) {
        throw std::invalid_argument("--task-quota must be at least 1");
    }
    _smp.reactor.task_quota_time = parse_milliseconds("task-quota-ms", get("task-quota-ms"));
    logging::set_default_level(parse_log_level(get("log-level")));
    if (has("logger-log-level")) {
        logging::apply_levels(get("logger-log-level"));
    }
}

int app::run(int argc, char** argv, std::function<future<int>()> main) {
    if (auto rc = parse(argc, argv)) {
        return *rc;
    }
    try {
        return run_shards(_smp, std::move(main));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", _name.c_str(), e.what());
        return 1;
    }
}

} // namespace shoal
