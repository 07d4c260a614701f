// shoal::app: the common command line, running main on shard 0 and returning its status, and
// stopping cleanly on SIGINT/SIGTERM (a child process, core_app_signal_helper, is signalled).
#include "core/app.hh"
#include "core/log.hh"
#include "core/reactor.hh"
#include "core/smp.hh"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <poll.h>
#include <pthread.h>
#include <regex>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

using namespace shoal;

namespace {

/// argv for app::parse, owning its strings.
class args {
public:
    args(std::initializer_list<std::string> words)
        : _words(words) {
        _words.insert(_words.begin(), "prog");
        for (auto& w : _words) {
            _ptrs.push_back(w.data());
        }
        _ptrs.push_back(nullptr);
    }
    int argc() const { return int(_words.size()); }
    char** argv() { return _ptrs.data(); }

private:
    std::vector<std::string> _words;
    std::vector<char*> _ptrs;
};

/// Silences stderr while alive (the parse errors are expected).
class quiet_stderr {
public:
    quiet_stderr() {
        std::fflush(stderr);
        _saved = ::dup(2);
        int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, 2);
        ::close(null);
    }
    ~quiet_stderr() {
        std::fflush(stderr);
        ::dup2(_saved, 2);
        ::close(_saved);
    }

private:
    int _saved;
};

struct child_result {
    bool exited = false;
    int exit_code = -1;
    int term_signal = 0;
    bool timed_out = false;
    std::string output;
};

/// Runs the helper with `argv`; once it prints "ready", sends `sig` (if non-zero); collects its
/// stdout until it exits. Everything is bounded by `limit`.
child_result run_helper(const std::vector<std::string>& argv, int sig,
                        std::chrono::seconds limit = std::chrono::seconds(60)) {
    child_result r;
    int pipefd[2];
    if (::pipe(pipefd) != 0) {
        ADD_FAILURE() << "pipe";
        return r;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
    posix_spawn_file_actions_addclose(&fa, pipefd[0]);
    posix_spawn_file_actions_addclose(&fa, pipefd[1]);
    std::vector<std::string> words{SHOAL_APP_SIGNAL_HELPER};
    words.insert(words.end(), argv.begin(), argv.end());
    std::vector<char*> ptrs;
    for (auto& w : words) {
        ptrs.push_back(w.data());
    }
    ptrs.push_back(nullptr);
    // The child must not inherit blocked signals from this process.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
    pid_t pid;
    int rc = posix_spawn(&pid, ptrs[0], &fa, &attr, ptrs.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    ::close(pipefd[1]);
    if (rc != 0) {
        ADD_FAILURE() << "posix_spawn: " << std::strerror(rc);
        ::close(pipefd[0]);
        return r;
    }
    auto deadline = std::chrono::steady_clock::now() + limit;
    bool signalled = sig == 0;
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                          std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            r.timed_out = true;
            ::kill(pid, SIGKILL);
            break;
        }
        pollfd p{pipefd[0], POLLIN, 0};
        if (::poll(&p, 1, int(left.count())) <= 0) {
            continue;
        }
        char buf[4096];
        ssize_t n = ::read(pipefd[0], buf, sizeof(buf));
        if (n <= 0) {
            break; // EOF: the child closed its stdout (exited)
        }
        r.output.append(buf, size_t(n));
        if (!signalled && r.output.find("ready\n") != std::string::npos) {
            ::kill(pid, sig);
            signalled = true;
        }
    }
    ::close(pipefd[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (WIFEXITED(status)) {
        r.exited = true;
        r.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        r.term_signal = WTERMSIG(status);
    }
    return r;
}

/// Restores the default log levels after a test that changed them from a command line.
struct level_guard {
    ~level_guard() { logging::set_default_level(log_level::info); }
};

logger app_test_log("app-test");

} // namespace

TEST(app, parse_cpuset) {
    EXPECT_EQ(parse_cpuset("3"), (std::vector<unsigned>{3}));
    EXPECT_EQ(parse_cpuset("0-3,6,8-9"), (std::vector<unsigned>{0, 1, 2, 3, 6, 8, 9}));
    EXPECT_THROW(parse_cpuset(""), std::invalid_argument);
    EXPECT_THROW(parse_cpuset("3-1"), std::invalid_argument);
    EXPECT_THROW(parse_cpuset("1,,2"), std::invalid_argument);
    EXPECT_THROW(parse_cpuset("a"), std::invalid_argument);
    EXPECT_THROW(parse_cpuset("1;2"), std::invalid_argument);
    EXPECT_THROW(parse_cpuset("99999"), std::invalid_argument);
}

TEST(app, parse_size) {
    EXPECT_EQ(parse_size("128"), 128u);
    EXPECT_EQ(parse_size("4K"), 4096u);
    EXPECT_EQ(parse_size("32k"), 32768u);
    EXPECT_EQ(parse_size("1M"), 1u << 20);
    EXPECT_EQ(parse_size("2G"), 2ull << 30);
    EXPECT_THROW(parse_size("x"), std::invalid_argument);
    EXPECT_THROW(parse_size("3Q"), std::invalid_argument);
}

TEST(app, common_options) {
    level_guard lg;
    app a("t", "test");
    args cl{"--smp", "3",        "--cpuset=0-2", "--poll-mode", "--idle-poll-us=50",  "--task-quota",
            "32",    "--no-pin", "--log-level",  "debug",       "--logger-log-level", "app-test=trace",
            "extra", "words"};
    EXPECT_EQ(a.parse(cl.argc(), cl.argv()), std::nullopt);
    const auto& o = a.engine_options();
    EXPECT_EQ(o.smp, 3u);
    EXPECT_EQ(o.cpuset, (std::vector<unsigned>{0, 1, 2}));
    EXPECT_FALSE(o.pin);
    EXPECT_TRUE(o.handle_signals);
    EXPECT_TRUE(o.reactor.poll_mode);
    EXPECT_EQ(o.reactor.idle_poll, std::chrono::microseconds(50));
    EXPECT_EQ(o.reactor.task_quota, 32u);
    EXPECT_EQ(a.positional(), (std::vector<std::string>{"extra", "words"}));
    EXPECT_EQ(app_test_log.level(), log_level::trace);
    logger fresh("app-test-fresh");
    EXPECT_EQ(fresh.level(), log_level::debug);
}

TEST(app, defaults) {
    app a("t", "test");
    args cl{};
    EXPECT_EQ(a.parse(cl.argc(), cl.argv()), std::nullopt);
    const auto& o = a.engine_options();
    EXPECT_EQ(o.smp, 1u);
    EXPECT_TRUE(o.cpuset.empty());
    EXPECT_TRUE(o.pin);
    EXPECT_FALSE(o.reactor.poll_mode);
    EXPECT_EQ(o.reactor.idle_poll, std::chrono::microseconds(200));
    EXPECT_EQ(o.reactor.task_quota, 256u);
    EXPECT_EQ(o.reactor.task_quota_time, std::chrono::microseconds(500));
}

TEST(app, task_quota_ms_sets_the_time_quota) {
    {
        app a("t", "test");
        args cl{"--task-quota-ms=2"};
        EXPECT_EQ(a.parse(cl.argc(), cl.argv()), std::nullopt);
        EXPECT_EQ(a.engine_options().reactor.task_quota_time, std::chrono::microseconds(2000));
    }
    {
        app a("t", "test");
        args cl{"--task-quota-ms", "0.25"};
        EXPECT_EQ(a.parse(cl.argc(), cl.argv()), std::nullopt);
        EXPECT_EQ(a.engine_options().reactor.task_quota_time, std::chrono::microseconds(250));
    }
    for (const char* bad : {"--task-quota-ms=-1", "--task-quota-ms=abc", "--task-quota-ms=1x"}) {
        app a("t", "test");
        args cl{bad};
        ::testing::internal::CaptureStderr();
        EXPECT_EQ(a.parse(cl.argc(), cl.argv()), 2) << bad;
        EXPECT_NE(::testing::internal::GetCapturedStderr().find("task-quota-ms"), std::string::npos);
    }
}

TEST(app, cpuset_sets_the_shard_count) {
    app a("t", "test");
    args cl{"--cpuset", "2,4"};
    EXPECT_EQ(a.parse(cl.argc(), cl.argv()), std::nullopt);
    EXPECT_EQ(a.engine_options().smp, 2u);
    EXPECT_EQ(a.engine_options().cpuset, (std::vector<unsigned>{2, 4}));
}

TEST(app, own_options) {
    app a("t", "test");
    a.add_option("port", "port to listen on", "8080")
        .add_option("buffer", "buffer size", "4K")
        .add_flag("verbose", "talk");
    args cl{"--port", "9000", "--verbose"};
    EXPECT_EQ(a.parse(cl.argc(), cl.argv()), std::nullopt);
    EXPECT_EQ(a.get("port"), "9000");
    EXPECT_EQ(a.get_size("buffer"), 4096u);
    EXPECT_TRUE(a.has("verbose"));
    EXPECT_TRUE(a.has("port"));
    EXPECT_FALSE(a.has("cpuset"));
    EXPECT_FALSE(a.has("no-such-option"));
    EXPECT_THROW(a.get("no-such-option"), std::invalid_argument);
    auto usage = a.usage();
    EXPECT_NE(usage.find("--port VALUE"), std::string::npos) << usage;
    EXPECT_NE(usage.find("(default 8080)"), std::string::npos) << usage;
    EXPECT_NE(usage.find("--smp VALUE"), std::string::npos) << usage;
}

TEST(app, help_and_bad_command_lines) {
    {
        app a("t", "test");
        args cl{"--help"};
        std::fflush(stdout);
        int saved = ::dup(1);
        int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, 1);
        auto rc = a.parse(cl.argc(), cl.argv());
        std::fflush(stdout);
        ::dup2(saved, 1);
        ::close(null);
        ::close(saved);
        EXPECT_EQ(rc, 0);
    }
    quiet_stderr q;
    for (auto bad : std::vector<std::vector<std::string>>{{"--nope"},
                                                          {"--smp"},
                                                          {"--smp", "0"},
                                                          {"--smp", "two"},
                                                          {"--poll-mode=yes"},
                                                          {"--task-quota", "0"},
                                                          {"--cpuset", "1-"},
                                                          {"--log-level", "loud"},
                                                          {"--logger-log-level", "nobody=info"}}) {
        app a("t", "test");
        std::vector<char*> ptrs{const_cast<char*>("prog")};
        for (auto& w : bad) {
            ptrs.push_back(w.data());
        }
        ptrs.push_back(nullptr);
        EXPECT_EQ(a.parse(int(ptrs.size() - 1), ptrs.data()), 2) << bad[0];
    }
    logging::set_default_level(log_level::info);
}

TEST(app, run_returns_mains_status) {
    app a("t", "test");
    args cl{"--smp", "2", "--no-pin"};
    unsigned shards = 0;
    unsigned main_shard = 99;
    int rc = a.run(cl.argc(), cl.argv(), [&] {
        shards = shard_count();
        main_shard = this_shard_id();
        return submit_to(1, [] { return 40 + int(this_shard_id()); }).then([](int v) { return v + 1; });
    });
    EXPECT_EQ(rc, 42);
    EXPECT_EQ(shards, 2u);
    EXPECT_EQ(main_shard, 0u);
    // After run, signals are handled as before it.
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, nullptr, &mask);
    EXPECT_FALSE(sigismember(&mask, SIGTERM));
}

TEST(app, run_with_a_bad_command_line_does_not_start) {
    quiet_stderr q;
    app a("t", "test");
    args cl{"--smp", "0"};
    bool ran = false;
    int rc = a.run(cl.argc(), cl.argv(), [&] {
        ran = true;
        return make_ready_future<int>(0);
    });
    EXPECT_EQ(rc, 2);
    EXPECT_FALSE(ran);
}

TEST(app, run_reports_a_failed_main) {
    quiet_stderr q;
    app a("t", "test");
    args cl{"--no-pin"};
    int rc = a.run(cl.argc(), cl.argv(), []() -> future<int> { throw std::runtime_error("main broke"); });
    EXPECT_EQ(rc, 1);
}

TEST(app_signals, child_exit_status_is_mains) {
    auto r = run_helper({"--smp", "2", "--no-pin", "exit", "7"}, 0);
    EXPECT_FALSE(r.timed_out);
    EXPECT_TRUE(r.exited);
    EXPECT_EQ(r.exit_code, 7) << r.output;
}

/// Checks the worker lines of a "wait" run: every shard drained all it had started.
void expect_drained(const std::string& output, unsigned shards) {
    std::regex line(R"(shard (\d+) started=(\d+) completed=(\d+))");
    std::map<unsigned, std::pair<long, long>> counts;
    for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it) {
        counts[unsigned(std::stoul((*it)[1]))] = {std::stol((*it)[2]), std::stol((*it)[3])};
    }
    ASSERT_EQ(counts.size(), size_t(shards)) << output;
    for (auto& [shard, c] : counts) {
        EXPECT_GT(c.first, 0) << "shard " << shard;
        EXPECT_EQ(c.first, c.second) << "shard " << shard << " stopped with work unfinished";
    }
    EXPECT_NE(output.find("stop requested with"), std::string::npos) << output;
    EXPECT_NE(output.find("stopped\n"), std::string::npos) << output;
}

TEST(app_signals, sigterm_stops_cleanly_with_work_in_flight) {
    auto r = run_helper({"--smp", "2", "--no-pin", "wait"}, SIGTERM);
    EXPECT_FALSE(r.timed_out) << r.output;
    ASSERT_TRUE(r.exited) << "killed by signal " << r.term_signal << "\n" << r.output;
    EXPECT_EQ(r.exit_code, 0) << r.output;
    expect_drained(r.output, 2);
    EXPECT_NE(r.output.find("exit 0\n"), std::string::npos) << r.output;
}

TEST(app_signals, sigint_stops_cleanly_with_work_in_flight) {
    auto r = run_helper({"--smp", "2", "--no-pin", "wait"}, SIGINT);
    EXPECT_FALSE(r.timed_out) << r.output;
    ASSERT_TRUE(r.exited) << "killed by signal " << r.term_signal << "\n" << r.output;
    EXPECT_EQ(r.exit_code, 0) << r.output;
    expect_drained(r.output, 2);
}

TEST(app_signals, signal_without_a_waiter_stops_the_shards) {
    for (int sig : {SIGTERM, SIGINT}) {
        auto r = run_helper({"--smp", "2", "--no-pin", "abrupt"}, sig);
        EXPECT_FALSE(r.timed_out) << r.output;
        ASSERT_TRUE(r.exited) << "killed by signal " << r.term_signal << "\n" << r.output;
        EXPECT_EQ(r.exit_code, 128 + sig) << r.output;
        // Tasks queued when the signal landed still ran on every shard.
        std::smatch m;
        std::regex counts(R"(scheduled=(\d+) ran=(\d+))");
        ASSERT_TRUE(std::regex_search(r.output, m, counts)) << r.output;
        EXPECT_GT(std::stol(m[1]), 0);
        EXPECT_EQ(m[1], m[2]) << r.output;
    }
}
