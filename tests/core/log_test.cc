// Logging: levels by name and by logger, the per-shard line prefix, fmt formatting.
#include "core/log.hh"
#include "core/smp.hh"
#include "support/run.hh"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>

#include <gtest/gtest.h>

using namespace shoal;
using shoal::testing::run_in_shards;

namespace {

logger test_log("log-test");
logger other_log("log-test-other");

/// Captures what is written to stderr (fd 2) while alive.
class stderr_capture {
public:
    stderr_capture() {
        const char* dir = std::getenv("TMPDIR");
        _path = std::string(dir && *dir ? dir : "/tmp") + "/shoal-log-XXXXXX";
        int fd = ::mkstemp(_path.data());
        std::fflush(stderr);
        _saved = ::dup(2);
        ::dup2(fd, 2);
        ::close(fd);
    }
    ~stderr_capture() {
        restore();
        ::unlink(_path.c_str());
    }
    /// Stops capturing and returns the text.
    std::string text() {
        restore();
        std::ifstream in(_path);
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }

private:
    void restore() {
        if (_saved >= 0) {
            std::fflush(stderr);
            ::dup2(_saved, 2);
            ::close(_saved);
            _saved = -1;
        }
    }
    std::string _path;
    int _saved = -1;
};

/// Restores the default levels after a test.
struct level_guard {
    ~level_guard() { logging::set_default_level(log_level::info); }
};

} // namespace

TEST(log, parses_levels) {
    EXPECT_EQ(parse_log_level("error"), log_level::error);
    EXPECT_EQ(parse_log_level("warn"), log_level::warn);
    EXPECT_EQ(parse_log_level("warning"), log_level::warn);
    EXPECT_EQ(parse_log_level("info"), log_level::info);
    EXPECT_EQ(parse_log_level("debug"), log_level::debug);
    EXPECT_EQ(parse_log_level("trace"), log_level::trace);
    EXPECT_THROW(parse_log_level("verbose"), std::invalid_argument);
    EXPECT_EQ(to_string(log_level::error), "ERROR");
    EXPECT_EQ(to_string(log_level::debug), "DEBUG");
}

TEST(log, levels_filter_lines) {
    level_guard g;
    test_log.set_level(log_level::warn);
    EXPECT_TRUE(test_log.is_enabled(log_level::error));
    EXPECT_TRUE(test_log.is_enabled(log_level::warn));
    EXPECT_FALSE(test_log.is_enabled(log_level::info));
    stderr_capture cap;
    test_log.info("hidden {}", 1);
    test_log.warn("shown {}", 2);
    test_log.error("also shown {}", "three");
    test_log.debug("hidden too");
    auto text = cap.text();
    EXPECT_EQ(text.find("hidden"), std::string::npos) << text;
    EXPECT_NE(text.find("WARN  shard 0 log-test - shown 2\n"), std::string::npos) << text;
    EXPECT_NE(text.find("ERROR shard 0 log-test - also shown three\n"), std::string::npos) << text;
}

TEST(log, default_level_and_per_logger_levels) {
    level_guard g;
    logging::set_default_level(log_level::error);
    EXPECT_EQ(test_log.level(), log_level::error);
    EXPECT_EQ(other_log.level(), log_level::error);
    logger later("log-test-later"); // created after: gets the default
    EXPECT_EQ(later.level(), log_level::error);

    EXPECT_TRUE(logging::set_level("log-test", log_level::trace));
    EXPECT_EQ(test_log.level(), log_level::trace);
    EXPECT_EQ(other_log.level(), log_level::error);
    EXPECT_FALSE(logging::set_level("no-such-logger", log_level::info));

    logging::apply_levels("log-test=warn,log-test-other=debug");
    EXPECT_EQ(test_log.level(), log_level::warn);
    EXPECT_EQ(other_log.level(), log_level::debug);
    EXPECT_THROW(logging::apply_levels("log-test"), std::invalid_argument);
    EXPECT_THROW(logging::apply_levels("log-test=loud"), std::invalid_argument);
    EXPECT_THROW(logging::apply_levels("nobody=info"), std::invalid_argument);
}

TEST(log, lines_carry_the_shard) {
    level_guard g;
    logging::set_default_level(log_level::info);
    stderr_capture cap;
    EXPECT_EQ(run_in_shards(2,
                            [] {
                                test_log.info("from shard {}", this_shard_id());
                                return submit_to(1, [] { test_log.info("from shard {}", this_shard_id()); });
                            }),
              0);
    auto text = cap.text();
    EXPECT_NE(text.find("INFO  shard 0 log-test - from shard 0\n"), std::string::npos) << text;
    EXPECT_NE(text.find("INFO  shard 1 log-test - from shard 1\n"), std::string::npos) << text;
}

TEST(log, formats_exceptions) {
    level_guard g;
    stderr_capture cap;
    test_log.error("failed: {}", std::make_exception_ptr(std::runtime_error("disk on fire")));
    test_log.error("none: {}", std::exception_ptr());
    auto text = cap.text();
    EXPECT_NE(text.find("failed: disk on fire"), std::string::npos) << text;
    EXPECT_NE(text.find("none: no exception"), std::string::npos) << text;
}
