// The stall detector: a task that keeps the shard's CPU past the threshold is counted and
// reported with a backtrace on standard error (rate limited); short tasks, sleeping and a zero
// threshold report nothing. Tasks burn CPU time, not wall time, so a busy host does not change
// the outcome.
#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "core/reactor.hh"
#include "core/timer.hh"
#include "support/run.hh"
#include "support/temp_file.hh"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

using namespace shoal;
using namespace std::chrono_literals;
using shoal::testing::run_in_shard;

namespace {

/// Spins until the calling thread has used `cpu` of CPU time (longer in wall time when the
/// host is busy).
void burn_cpu(std::chrono::milliseconds cpu) {
    auto used = [] {
        timespec ts{};
        ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
    };
    const auto end = used() + cpu;
    while (used() < end) {
    }
}

/// Sends standard error to a file while it lives; `finish` restores it and returns the text.
class stderr_capture {
public:
    stderr_capture()
        : _file("", "shoal-stall-stderr") {
        std::fflush(stderr);
        _saved = ::dup(STDERR_FILENO);
        int fd = ::open(_file.path().c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
        EXPECT_GE(fd, 0);
        ::dup2(fd, STDERR_FILENO);
        ::close(fd);
    }
    ~stderr_capture() { restore(); }
    std::string finish() {
        restore();
        std::ifstream in(_file.path());
        std::stringstream text;
        text << in.rdbuf();
        return text.str();
    }

private:
    void restore() {
        if (_saved >= 0) {
            std::fflush(stderr);
            ::dup2(_saved, STDERR_FILENO);
            ::close(_saved);
            _saved = -1;
        }
    }
    shoal::testing::temp_file _file;
    int _saved = -1;
};

size_t count_of(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
        ++n;
    }
    return n;
}

reactor_config with_threshold(std::chrono::milliseconds t) {
    reactor_config cfg;
    cfg.stall_threshold = t;
    return cfg;
}

} // namespace

TEST(stall_detector, a_task_past_the_threshold_is_counted_and_reported_with_a_backtrace) {
    std::string text;
    uint64_t stalls = 0;
    int rc = run_in_shard(
        [&]() -> future<> {
            const uint64_t before = local_reactor().stalls();
            stderr_capture cap;
            burn_cpu(80ms); // one task: the reactor makes no progress meanwhile
            co_await yield();
            stalls = local_reactor().stalls() - before;
            text = cap.finish();
        },
        with_threshold(10ms));
    ASSERT_EQ(rc, 0);
    EXPECT_EQ(stalls, 1u) << text;
    EXPECT_EQ(
        count_of(text, "shoal: reactor stalled on shard 0: one task or poll ran for over 10 ms of CPU time"),
        1u)
        << text;
    EXPECT_NE(text.find("backtrace:\n"), std::string::npos) << text;
    EXPECT_GE(count_of(text, "[0x"), 3u) << "frames of the stalled code:\n" << text;
}

TEST(stall_detector, short_tasks_and_sleeping_are_not_stalls) {
    uint64_t stalls = ~uint64_t(0);
    std::string text;
    int rc = run_in_shard(
        [&]() -> future<> {
            const uint64_t before = local_reactor().stalls();
            stderr_capture cap;
            for (int i = 0; i < 100; ++i) {
                burn_cpu(1ms); // 100 ms of CPU in all, in tasks a tenth of the threshold long
                co_await yield();
            }
            co_await sleep(50ms);
            stalls = local_reactor().stalls() - before;
            text = cap.finish();
        },
        with_threshold(10ms));
    ASSERT_EQ(rc, 0);
    EXPECT_EQ(stalls, 0u) << text;
    EXPECT_EQ(text.find("reactor stalled"), std::string::npos) << text;
}

TEST(stall_detector, zero_threshold_turns_it_off) {
    uint64_t stalls = ~uint64_t(0);
    std::string text;
    int rc = run_in_shard(
        [&]() -> future<> {
            stderr_capture cap;
            burn_cpu(60ms);
            co_await yield();
            stalls = local_reactor().stalls();
            text = cap.finish();
        },
        with_threshold(0ms));
    ASSERT_EQ(rc, 0);
    EXPECT_EQ(stalls, 0u);
    EXPECT_EQ(text.find("reactor stalled"), std::string::npos) << text;
}

TEST(stall_detector, reports_are_rate_limited_and_every_stall_is_counted) {
    uint64_t stalls = 0;
    std::string text;
    int rc = run_in_shard(
        [&]() -> future<> {
            const uint64_t before = local_reactor().stalls();
            stderr_capture cap;
            for (int i = 0; i < 8; ++i) {
                burn_cpu(30ms); // one stall each: the yield between them is progress
                co_await yield();
            }
            stalls = local_reactor().stalls() - before;
            text = cap.finish();
        },
        with_threshold(5ms));
    ASSERT_EQ(rc, 0);
    EXPECT_GE(stalls, 8u) << text;
    EXPECT_EQ(count_of(text, "shoal: reactor stalled on shard 0"), 5u) << text; // five a minute
}
