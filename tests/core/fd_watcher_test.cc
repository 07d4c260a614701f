// The io_uring fd watcher (behind RDMA's CQ channel, rdma_cm channel and device events):
// a failed poll is watched again (a lost wake-up would leave a shard asleep with completions
// queued), and a poll that keeps failing makes it give up loudly. Native: no device needed.
#include "core/fd_watcher.hh"
#include "core/future_util.hh"
#include "core/timer.hh"
#include "support/patience.hh"
#include "support/run.hh"

#include <cerrno>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

using namespace shoal;
using namespace std::chrono_literals;
using shoal::testing::eventually;
using shoal::testing::patience;
using shoal::testing::run_in_shards;

TEST(fd_watcher, a_failed_poll_is_watched_again) {
    int rc = run_in_shards(1, []() -> future<> {
        int p[2];
        EXPECT_EQ(pipe2(p, O_NONBLOCK), 0);
        unsigned readable = 0;
        fd_watcher w(p[0], [&] {
            char c;
            while (read(p[0], &c, 1) == 1) {
                ++readable;
            }
        });
        // The armed poll fails (as io_uring reports it): the watcher must poll again.
        w.complete(-EINTR, 0);
        EXPECT_EQ(w.errors(), 1u);
        EXPECT_FALSE(w.failed());
        EXPECT_EQ(write(p[1], "x", 1), 1);
        bool woke = co_await eventually([&] { return readable == 1; }, patience);
        EXPECT_TRUE(woke) << "the wake-up after a poll error was lost";
        co_await w.stop();
        close(p[0]);
        close(p[1]);
    });
    EXPECT_EQ(rc, 0);
}

TEST(fd_watcher, a_poll_that_keeps_failing_gives_up_loudly) {
    int rc = run_in_shards(1, []() -> future<> {
        int p[2];
        EXPECT_EQ(pipe2(p, O_NONBLOCK), 0);
        close(p[0]);
        close(p[1]);
        int failed_with = 0;
        fd_watcher w(
            p[0], [] {}, [&](int err) { failed_with = err; });
        w.start(); // a closed fd: every poll fails with EBADF
        bool gave_up = co_await eventually([&] { return failed_with != 0; }, patience);
        EXPECT_TRUE(gave_up);
        EXPECT_EQ(failed_with, EBADF);
        EXPECT_TRUE(w.failed());
        EXPECT_EQ(w.errors(), fd_watcher::max_consecutive_errors + 1);
        co_await w.stop();
    });
    EXPECT_EQ(rc, 0);
}
