// shoal-echo-epoll: the baseline shoal-echo is measured against. The classic design: one thread
// per core, each with its own SO_REUSEPORT listener and a level-triggered epoll loop over
// non-blocking sockets; read into a per-thread buffer, write straight back, and park what the
// kernel did not take (EPOLLOUT) until the socket drains. No io_uring, no shoal runtime.
//
//   shoal-echo-epoll [--host 0.0.0.0] [--port 7001] [--threads 1] [--cpuset 0,1]
// --port 0 takes a port the kernel chooses; the "echo on HOST:PORT" line names it.

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

namespace {

std::atomic<bool> g_stop{false};
int g_stop_fd = -1;

void on_signal(int) {
    g_stop = true;
    uint64_t one = 1;
    ssize_t n = ::write(g_stop_fd, &one, sizeof(one));
    (void)n;
}

/// `text` as a whole number in [lo, hi], or exit 2 naming `option`.
int number(const std::string& option, const std::string& text, long lo, long hi) {
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) {
        std::fprintf(stderr, "shoal-echo-epoll: %s '%s': expected a number in %ld..%ld\n", option.c_str(),
                     text.c_str(), lo, hi);
        std::exit(2);
    }
    return int(v);
}

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "shoal-echo-epoll: %s: %s\n", what.c_str(), std::strerror(errno));
    std::exit(1);
}

/// Bytes the kernel did not take yet, per connection.
struct pending {
    std::vector<char> data;
    size_t off = 0;
};

int make_listener(const sockaddr_storage& addr, socklen_t len) {
    int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        die("socket");
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); // inherited by accepted sockets
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) < 0) {
        die("bind");
    }
    if (::listen(fd, 1024) < 0) {
        die("listen");
    }
    return fd;
}

void serve(int lfd, int cpu) {
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    }
    int ep = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = lfd;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    ev.data.fd = g_stop_fd;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, g_stop_fd, &ev);
    std::unordered_map<int, pending> parked;
    constexpr size_t buf_size = 64 * 1024;
    auto buf = std::make_unique<char[]>(buf_size);
    epoll_event events[256];
    auto drop = [&](int fd) {
        parked.erase(fd);
        ::close(fd); // also leaves the epoll set
    };
    // Out of descriptors or memory, accept fails and the connection stays in the backlog: the
    // listener leaves the (level-triggered) set for a pause, 1 ms doubling to 100 ms, instead of
    // waking the loop at once again.
    int backoff_ms = 0;
    bool paused = false;
    auto resume_at = std::chrono::steady_clock::now();
    while (!g_stop) {
        int timeout = -1;
        if (paused) {
            auto left =
                std::chrono::ceil<std::chrono::milliseconds>(resume_at - std::chrono::steady_clock::now());
            timeout = int(std::max<long>(0, long(left.count())));
        }
        int n = ::epoll_wait(ep, events, 256, timeout);
        if (paused && std::chrono::steady_clock::now() >= resume_at) {
            ev.events = EPOLLIN;
            ev.data.fd = lfd;
            ::epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
            paused = false;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        for (int i = 0; i < n; ++i) {
            int fd = events[i].data.fd;
            if (fd == g_stop_fd) {
                continue;
            }
            if (fd == lfd) {
                for (;;) {
                    int c = ::accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (c < 0) {
                        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                            backoff_ms = std::clamp(backoff_ms * 2, 1, 100);
                            ::epoll_ctl(ep, EPOLL_CTL_DEL, lfd, nullptr);
                            paused = true;
                            resume_at =
                                std::chrono::steady_clock::now() + std::chrono::milliseconds(backoff_ms);
                        }
                        break;
                    }
                    backoff_ms = 0;
                    epoll_event cev{};
                    cev.events = EPOLLIN | EPOLLRDHUP;
                    cev.data.fd = c;
                    ::epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
                }
                continue;
            }
            if (events[i].events & EPOLLOUT) {
                // Drain what was parked, then listen for input again.
                auto& p = parked[fd];
                while (p.off < p.data.size()) {
                    ssize_t w = ::send(fd, p.data.data() + p.off, p.data.size() - p.off, MSG_NOSIGNAL);
                    if (w < 0) {
                        break;
                    }
                    p.off += size_t(w);
                }
                if (p.off < p.data.size()) {
                    if (errno != EAGAIN) {
                        drop(fd);
                    }
                    continue;
                }
                parked.erase(fd);
                epoll_event cev{};
                cev.events = EPOLLIN | EPOLLRDHUP;
                cev.data.fd = fd;
                ::epoll_ctl(ep, EPOLL_CTL_MOD, fd, &cev);
                continue;
            }
            // Readable: read and echo; read again only while the buffer came back full.
            for (int round = 0; round < 4; ++round) {
                ssize_t r = ::recv(fd, buf.get(), buf_size, 0);
                if (r == 0 || (r < 0 && errno != EAGAIN)) {
                    drop(fd);
                    break;
                }
                if (r < 0) {
                    break;
                }
                size_t off = 0;
                while (off < size_t(r)) {
                    ssize_t w = ::send(fd, buf.get() + off, size_t(r) - off, MSG_NOSIGNAL);
                    if (w < 0) {
                        break;
                    }
                    off += size_t(w);
                }
                if (off < size_t(r)) {
                    if (errno != EAGAIN) {
                        drop(fd);
                        break;
                    }
                    // The peer is slow: park the rest and wait for EPOLLOUT instead of input.
                    auto& p = parked[fd];
                    p.data.assign(buf.get() + off, buf.get() + r);
                    p.off = 0;
                    epoll_event cev{};
                    cev.events = EPOLLOUT;
                    cev.data.fd = fd;
                    ::epoll_ctl(ep, EPOLL_CTL_MOD, fd, &cev);
                    break;
                }
                if (size_t(r) < buf_size) {
                    break;
                }
            }
        }
    }
    ::close(ep);
}

} // namespace

int main(int argc, char** argv) {
    std::string host = "0.0.0.0";
    int port = 7001;
    int threads = 1;
    std::vector<int> cpus;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "shoal-echo-epoll: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--host") {
            host = value();
        } else if (a == "--port") {
            port = number(a, value(), 0, 65535);
        } else if (a == "--threads") {
            threads = number(a, value(), 1, 1024);
        } else if (a == "--cpuset") {
            std::string v = value();
            for (size_t p = 0; p <= v.size();) {
                size_t comma = std::min(v.find(',', p), v.size());
                cpus.push_back(number(a, v.substr(p, comma - p), 0, CPU_SETSIZE - 1));
                p = comma + 1;
            }
        } else {
            std::fprintf(stderr,
                         "usage: shoal-echo-epoll [--host H] [--port P] [--threads N] [--cpuset 0,1,...]\n");
            return a == "--help" ? 0 : 2;
        }
    }
    sockaddr_storage addr{};
    socklen_t len;
    auto* in4 = reinterpret_cast<sockaddr_in*>(&addr);
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
    if (::inet_pton(AF_INET, host.c_str(), &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons(uint16_t(port));
        len = sizeof(*in4);
    } else if (::inet_pton(AF_INET6, host.c_str(), &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(uint16_t(port));
        len = sizeof(*in6);
    } else {
        std::fprintf(stderr, "shoal-echo-epoll: bad address '%s'\n", host.c_str());
        return 2;
    }
    g_stop_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    std::signal(SIGPIPE, SIG_IGN);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        int lfd = make_listener(addr, len);
        if (t == 0 && port == 0) {
            // --port 0: the kernel chose; the other threads' listeners share the port it chose.
            if (::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) < 0) {
                die("getsockname");
            }
            port = ntohs(addr.ss_family == AF_INET ? in4->sin_port : in6->sin6_port);
        }
        int cpu = cpus.empty() ? -1 : cpus[size_t(t) % cpus.size()];
        pool.emplace_back(serve, lfd, cpu);
    }
    std::printf("shoal-echo-epoll: echo on %s:%d (%d threads); Ctrl-C stops\n", host.c_str(), port, threads);
    std::fflush(stdout);
    for (auto& t : pool) {
        t.join();
    }
    return 0;
}
