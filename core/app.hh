#pragma once

#include "core/future.hh"
#include "core/smp.hh"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace shoal {

/// The command line of a shoal program: the common options (`--smp`, `--cpuset`,
/// `--poll-mode`, `--idle-poll-us`, `--task-quota`, `--task-quota-ms`, `--log-level`, `--logger-log-level`,
/// `--help`) plus the program's own, declared with `add_option`/`add_flag`. Values are
/// `--name value` or `--name=value`; words that are not options are positional arguments.
class app {
public:
    app(std::string name, std::string description);

    /// Declares `--name VALUE` with a default shown in `--help` (empty: no default).
    app& add_option(std::string name, std::string help, std::string default_value = {});
    /// Declares a boolean `--name`.
    app& add_flag(std::string name, std::string help);

    /// The value of an option (its default if not given); throws for an undeclared name.
    const std::string& get(const std::string& name) const;
    /// The value parsed as an unsigned/signed integer or size (accepts K, M, G suffixes).
    uint64_t get_size(const std::string& name) const;
    /// Whether a flag was given (or an option has a non-empty value).
    bool has(const std::string& name) const;
    /// Words that were not options, in order.
    const std::vector<std::string>& positional() const noexcept { return _positional; }
    /// The engine options the command line selected.
    const smp_options& engine_options() const noexcept { return _smp; }

    /// Parses `argv` without starting anything. Returns an exit code when the program should
    /// stop now (`--help`: 0, a bad command line: 2, with the message printed), else nothing.
    std::optional<int> parse(int argc, char** argv);

    /// Parses the command line, starts the shards, runs `main` on shard 0 and returns its exit
    /// status. SIGINT and SIGTERM resolve `stop_requested()`; if nothing waits for it they stop
    /// the shards, which drain their queued work first.
    int run(int argc, char** argv, std::function<future<int>()> main);

    /// The `--help` text.
    std::string usage() const;

private:
    struct option {
        std::string help;
        std::string value;
        bool is_flag = false;
        bool given = false;
        std::string default_value; // shown by --help, whatever was parsed
    };
    void apply_common();

    std::string _name;
    std::string _description;
    std::map<std::string, option> _options;
    std::vector<std::string> _order;
    std::vector<std::string> _positional;
    smp_options _smp;
};

/// Parses "0-3,6,8-9" into CPU numbers; throws std::invalid_argument on bad syntax.
std::vector<unsigned> parse_cpuset(const std::string& text);

/// Parses "128", "4K", "32k", "1M", "2G" into bytes; throws std::invalid_argument.
uint64_t parse_size(const std::string& text);

} // namespace shoal
