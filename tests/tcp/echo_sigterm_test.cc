// shoal-echo as a process: SIGTERM stops it within its shutdown timeout while a client keeps
// sending and never reads. The client is a plain non-blocking socket in the test
// process; the server runs as a child with its stdout on a pipe.

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

extern char** environ;

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

/// A child process with its stdout on a pipe.
struct child {
    pid_t pid = -1;
    int out = -1;
    std::string output;

    /// Reads what the child printed until `pred(output)` or `limit`; returns `pred(output)`.
    template <typename Pred>
    bool read_until(Pred pred, clock_type::duration limit) {
        auto deadline = clock_type::now() + limit;
        while (!pred(output)) {
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
            if (left.count() <= 0) {
                return false;
            }
            pollfd p{out, POLLIN, 0};
            if (::poll(&p, 1, int(left.count())) <= 0) {
                continue;
            }
            char buf[4096];
            ssize_t n = ::read(out, buf, sizeof(buf));
            if (n <= 0) {
                return pred(output);
            }
            output.append(buf, size_t(n));
        }
        return true;
    }

    /// Waits up to `limit` for the child to exit; returns its wait status, or -1 (then kills it).
    int wait_exit(clock_type::duration limit) {
        auto deadline = clock_type::now() + limit;
        for (;;) {
            int status = 0;
            if (::waitpid(pid, &status, WNOHANG) == pid) {
                pid = -1;
                return status;
            }
            if (clock_type::now() >= deadline) {
                return -1;
            }
            std::this_thread::sleep_for(5ms);
        }
    }

    ~child() {
        if (pid > 0) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
        }
        if (out >= 0) {
            ::close(out);
        }
    }
};

bool spawn(child& c, std::vector<std::string> words) {
    int pipefd[2];
    if (::pipe(pipefd) != 0) {
        return false;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
    posix_spawn_file_actions_addclose(&fa, pipefd[0]);
    posix_spawn_file_actions_addclose(&fa, pipefd[1]);
    std::vector<char*> argv;
    for (auto& w : words) {
        argv.push_back(w.data());
    }
    argv.push_back(nullptr);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
    int rc = posix_spawn(&c.pid, argv[0], &fa, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    ::close(pipefd[1]);
    c.out = pipefd[0];
    if (rc != 0) {
        c.pid = -1;
        return false;
    }
    return true;
}

/// The port in "echo on 127.0.0.1:PORT", or 0.
uint16_t port_in(const std::string& output) {
    auto at = output.find("echo on 127.0.0.1:");
    if (at == std::string::npos) {
        return 0;
    }
    return uint16_t(std::stoi(output.substr(at + std::strlen("echo on 127.0.0.1:"))));
}

/// Sends from a non-blocking socket until nothing more has gone out for `quiet` (every buffer
/// between the two ends is full: the server's writes are blocked); returns the bytes sent.
size_t send_until_stuck(int fd, clock_type::duration quiet, clock_type::duration limit) {
    std::vector<char> chunk(64 << 10, 'x');
    size_t sent = 0;
    auto deadline = clock_type::now() + limit;
    auto last_progress = clock_type::now();
    while (clock_type::now() < deadline) {
        ssize_t n = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            sent += size_t(n);
            last_progress = clock_type::now();
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            break;
        }
        if (clock_type::now() - last_progress >= quiet) {
            break;
        }
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, 10);
    }
    return sent;
}

} // namespace

TEST(EchoApp, SigtermStopsWithinTheShutdownTimeoutWhileAClientDoesNotRead) {
    child server;
    ASSERT_TRUE(spawn(server, {SHOAL_ECHO_BINARY, "server", "--host", "127.0.0.1", "--port", "0", "--smp",
                               "2", "--no-pin", "--shutdown-timeout-ms", "300"}));
    ASSERT_TRUE(server.read_until([](const std::string& o) { return port_in(o) != 0; }, 60s))
        << server.output;
    uint16_t port = port_in(server.output);

    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0) << std::strerror(errno);
    size_t sent = send_until_stuck(fd, 500ms, 60s);
    // Far more than the kernel buffers on both sides hold, so the server is stuck in a write.
    EXPECT_GT(sent, size_t(1) << 20);

    auto start = clock_type::now();
    ASSERT_EQ(::kill(server.pid, SIGTERM), 0);
    int status = server.wait_exit(30s);
    auto took = clock_type::now() - start;
    ::close(fd);
    ASSERT_NE(status, -1) << "shoal-echo did not exit within 30 s of SIGTERM";
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
    EXPECT_GE(took, 300ms) << "the shutdown timeout was not honoured";
    server.read_until([](const std::string& o) { return o.find("sleeps") != std::string::npos; }, 10s);
    EXPECT_NE(server.output.find("served 1 connections\n"), std::string::npos) << server.output;
    EXPECT_NE(server.output.find("1 connections aborted at shutdown"), std::string::npos) << server.output;
}
