// CPU claims: shoal processes started with default flags take CPUs the others do not hold, and
// a process left to share a CPU says so and does not spin when idle. Lock files go to a private
// directory (SHOAL_CPU_LOCK_DIR) so that parallel tests do not see each other.
#include "core/cpu_claim.hh"
#include "core/reactor.hh"
#include "core/smp.hh"
#include "support/cpu_lock_dir.hh"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace shoal;

namespace {

/// What a child engine saw: its shard's CPU, its idle-poll time and its stderr.
struct child_report {
    int cpu = -1;
    long idle_poll_us = -1;
    std::string log;
};

/// A process running an engine with default placement (optionally restricted to `only_cpu`),
/// which reports and then waits until told to exit, so that several hold their CPUs at once.
class child_engine {
public:
    child_engine(const std::string& dir, int index, int only_cpu) {
        _log = dir + "/child-" + std::to_string(index) + ".log";
        int up[2], down[2];
        EXPECT_EQ(::pipe(up), 0);
        EXPECT_EQ(::pipe(down), 0);
        _pid = ::fork();
        if (_pid == 0) {
            ::close(up[0]);
            ::close(down[1]);
            std::FILE* err = std::freopen(_log.c_str(), "w", stderr);
            (void)err;
            if (only_cpu >= 0) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(only_cpu, &set);
                ::sched_setaffinity(0, sizeof(set), &set);
            }
            smp_options opts; // defaults: one pinned shard, placement chosen by claims
            int rc = run_shards(opts, [&]() -> future<int> {
                std::string line = std::to_string(::sched_getcpu()) + " " +
                                   std::to_string(local_reactor().config().idle_poll.count()) + "\n";
                ssize_t n = ::write(up[1], line.data(), line.size());
                char c;
                n += ::read(down[0], &c, 1); // hold the CPU until the parent is done
                return make_ready_future<int>(n > 0 ? 0 : 1);
            });
            std::fflush(stderr);
            ::_exit(rc);
        }
        ::close(up[1]);
        ::close(down[0]);
        _up = up[0];
        _down = down[1];
    }
    /// Reads what the child reported (blocks until it has started).
    child_report report() {
        child_report r;
        std::string text;
        char buf[64];
        ssize_t n;
        while (text.find('\n') == std::string::npos && (n = ::read(_up, buf, sizeof(buf))) > 0) {
            text.append(buf, size_t(n));
        }
        std::istringstream in(text);
        in >> r.cpu >> r.idle_poll_us;
        return r;
    }
    /// Lets the child exit and returns its stderr.
    std::string finish() {
        ::close(_down);
        int status = 0;
        ::waitpid(_pid, &status, 0);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ::close(_up);
        std::ifstream f(_log);
        std::stringstream s;
        s << f.rdbuf();
        return s.str();
    }

private:
    pid_t _pid = -1;
    int _up = -1;
    int _down = -1;
    std::string _log;
};

} // namespace

TEST(cpu_claims, claims_skip_cpus_another_holder_has) {
    shoal::testing::private_cpu_lock_dir dir;
    auto a = cpu_claims::claim({0, 1}, 1);
    EXPECT_EQ(a.cpus(), (std::vector<unsigned>{0}));
    EXPECT_FALSE(a.shared());
    auto b = cpu_claims::claim({0, 1}, 1); // a separate claim: flock conflicts even in-process
    EXPECT_EQ(b.cpus(), (std::vector<unsigned>{1}));
    EXPECT_FALSE(b.shared());
    auto c = cpu_claims::claim({0, 1}, 2);
    EXPECT_TRUE(c.shared());
    EXPECT_EQ(c.cpus().size(), 2u);
    a = cpu_claims(); // released
    auto d = cpu_claims::claim({0, 1}, 1);
    EXPECT_EQ(d.cpus(), (std::vector<unsigned>{0}));
    EXPECT_FALSE(d.shared());
}

TEST(cpu_claims, two_default_processes_get_different_cpus) {
    auto allowed = allowed_cpus();
    if (allowed.size() < 2) {
        GTEST_SKIP() << "needs two CPUs";
    }
    shoal::testing::private_cpu_lock_dir dir;
    child_engine first(dir.path(), 1, -1);
    auto r1 = first.report();
    child_engine second(dir.path(), 2, -1);
    auto r2 = second.report();
    EXPECT_NE(r1.cpu, r2.cpu);
    EXPECT_EQ(r1.idle_poll_us, 200); // exclusive CPUs: the usual idle polling
    EXPECT_EQ(r2.idle_poll_us, 200);
    // The second child inherited the first one's pipes: it must go first.
    EXPECT_EQ(second.finish().find("--cpuset"), std::string::npos);
    EXPECT_EQ(first.finish().find("--cpuset"), std::string::npos);
}

TEST(cpu_claims, processes_sharing_one_cpu_warn_and_do_not_spin) {
    shoal::testing::private_cpu_lock_dir dir;
    int cpu = int(allowed_cpus().front());
    child_engine first(dir.path(), 1, cpu);
    auto r1 = first.report();
    child_engine second(dir.path(), 2, cpu);
    auto r2 = second.report();
    EXPECT_EQ(r1.cpu, cpu);
    EXPECT_EQ(r2.cpu, cpu);
    EXPECT_EQ(r1.idle_poll_us, 200);   // it got the CPU to itself when it started
    EXPECT_EQ(r2.idle_poll_us, 0);     // the second one shares: no spinning when idle
    std::string log = second.finish(); // first: it holds copies of the first child's pipes
    EXPECT_NE(log.find("--cpuset"), std::string::npos) << log;
    EXPECT_EQ(first.finish().find("--cpuset"), std::string::npos);
}
