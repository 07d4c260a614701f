#pragma once

#include <exception>
#include <string>
#include <string_view>

#include <fmt/core.h>
#include <fmt/format.h>

namespace shoal {

/// Severity of a log line, most severe first.
enum class log_level { error, warn, info, debug, trace };

/// Parses "error", "warn", "info", "debug" or "trace"; throws std::invalid_argument otherwise.
log_level parse_log_level(std::string_view name);
std::string_view to_string(log_level l) noexcept;

/// A named source of log lines. Lines go to stderr as
/// `LEVEL  shard N  name - message`, formatted with fmt. Each logger's level can be set by
/// name (`--logger-log-level name=debug`) or all at once (`--log-level`).
class logger {
public:
    /// Registers the logger under `name`; loggers are normally namespace-scope statics.
    explicit logger(std::string name);
    ~logger();
    logger(const logger&) = delete;
    logger& operator=(const logger&) = delete;

    const std::string& name() const noexcept { return _name; }
    log_level level() const noexcept { return _level; }
    void set_level(log_level l) noexcept { _level = l; }
    bool is_enabled(log_level l) const noexcept { return l <= _level; }

    template <typename... A>
    void log(log_level l, fmt::format_string<A...> f, A&&... a) {
        if (is_enabled(l)) {
            write(l, fmt::format(f, std::forward<A>(a)...));
        }
    }
    template <typename... A>
    void error(fmt::format_string<A...> f, A&&... a) {
        log(log_level::error, f, std::forward<A>(a)...);
    }
    template <typename... A>
    void warn(fmt::format_string<A...> f, A&&... a) {
        log(log_level::warn, f, std::forward<A>(a)...);
    }
    template <typename... A>
    void info(fmt::format_string<A...> f, A&&... a) {
        log(log_level::info, f, std::forward<A>(a)...);
    }
    template <typename... A>
    void debug(fmt::format_string<A...> f, A&&... a) {
        log(log_level::debug, f, std::forward<A>(a)...);
    }
    template <typename... A>
    void trace(fmt::format_string<A...> f, A&&... a) {
        log(log_level::trace, f, std::forward<A>(a)...);
    }

private:
    void write(log_level l, const std::string& message);
    std::string _name;
    log_level _level;
};

/// Log levels of the whole process.
struct logging {
    /// Sets every registered logger (and later ones) to `l`.
    static void set_default_level(log_level l);
    /// Sets the logger called `name`; returns false if there is none.
    static bool set_level(std::string_view name, log_level l);
    /// Applies "name=level[,name=level...]"; throws std::invalid_argument on a bad entry.
    static void apply_levels(std::string_view spec);
};

} // namespace shoal

/// Formats an exception_ptr as its what() (or "unknown exception").
template <>
struct fmt::formatter<std::exception_ptr> : fmt::formatter<std::string_view> {
    auto format(const std::exception_ptr& ex, fmt::format_context& ctx) const -> decltype(ctx.out()) {
        std::string text = "no exception";
        if (ex) {
            try {
                std::rethrow_exception(ex);
            } catch (const std::exception& e) {
                text = e.what();
            } catch (...) {
                text = "unknown exception";
            }
        }
        return fmt::formatter<std::string_view>::format(text, ctx);
    }
};
