// Listeners under file-descriptor exhaustion: with RLIMIT_NOFILE lowered so that accept fails
// with EMFILE, a listener served by net::server_connections keeps accepting once descriptors are
// free again, and with a refusal message it answers the connections it has no descriptor for
// and closes them. Also the tracker's own retry for transports that report such failures.
//
// The clients are plain blocking sockets moved above the lowered limit (descriptors already open
// stay valid), so only the server's accepts compete for the few descriptors left.

#include "test_util.hh"

#include "core/timer.hh"
#include "net/server_connections.hh"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::net;
using namespace shoal::tcp_test;
using namespace std::chrono_literals;

namespace {

constexpr std::string_view greeting = "HELLO\r\n";
constexpr std::string_view refusal = "ERROR Too many open connections\r\n";

#if defined(__SANITIZE_ADDRESS__)
// The sanitizer build (ASan with UBSan) cannot run a process out of descriptors: UBSan's vptr
// check probes memory through a pipe, which fails then, and it reports every object it checks
// as having an invalid vptr. tests/kv/fd_exhaustion_test.py covers the behaviour on the binary.
constexpr bool sanitized = true;
#else
constexpr bool sanitized = false;
#endif

/// The process's open descriptors.
std::vector<int> open_fds() {
    std::vector<int> fds;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
        fds.push_back(std::stoi(e.path().filename().string()));
    }
    return fds;
}

/// Lowers the soft RLIMIT_NOFILE for its lifetime so that exactly `free` descriptors are left
/// below it (holes below the limit are filled with placeholders). Restores the limit when
/// destroyed.
struct lowered_nofile {
    rlimit saved{};
    rlim_t limit = 0;
    size_t free = 0;
    std::vector<int> fillers;

    /// Descriptors from `ignore_from` up (the clients') are left out when placing the limit.
    lowered_nofile(size_t want_free, int ignore_from) {
        getrlimit(RLIMIT_NOFILE, &saved);
        auto fds = open_fds();
        std::erase_if(fds, [&](int fd) { return fd >= ignore_from; });
        int highest = *std::max_element(fds.begin(), fds.end());
        limit = rlim_t(highest) + 1 + want_free;
        rlimit rl = saved;
        rl.rlim_cur = limit;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            throw std::system_error(errno, std::system_category(), "setrlimit");
        }
        for (;;) {
            int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (fd < 0) {
                break;
            }
            fillers.push_back(fd);
        }
        free = std::min(want_free, fillers.size());
        for (size_t i = 0; i < free; ++i) {
            ::close(fillers.back());
            fillers.pop_back();
        }
    }
    ~lowered_nofile() {
        for (int fd : fillers) {
            ::close(fd);
        }
        setrlimit(RLIMIT_NOFILE, &saved);
    }
};

/// Blocking loopback clients whose descriptors sit at `base` and above (above the limit the
/// test lowers later), connected to `addr` one after the other.
struct clients {
    std::vector<int> fds;

    clients(size_t n, int base) {
        for (size_t i = 0; i < n; ++i) {
            int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (s < 0) {
                throw std::system_error(errno, std::system_category(), "socket");
            }
            int high = ::fcntl(s, F_DUPFD_CLOEXEC, base + int(i));
            ::close(s);
            if (high < 0) {
                throw std::system_error(errno, std::system_category(), "F_DUPFD");
            }
            fds.push_back(high);
        }
    }
    ~clients() {
        for (int fd : fds) {
            if (fd >= 0) {
                ::close(fd);
            }
        }
    }
    void connect_all(const socket_address& addr) {
        for (int fd : fds) {
            if (::connect(fd, addr.as_sockaddr(), addr.length()) != 0) {
                throw std::system_error(errno, std::system_category(), "connect");
            }
            int flags = ::fcntl(fd, F_GETFL);
            ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
        }
    }
    void close(size_t i) {
        ::close(fds[i]);
        fds[i] = -1;
    }
};

/// What a client read so far and whether it saw the end of the stream.
struct client_view {
    std::string bytes;
    bool eof = false;
};

/// Reads what client socket `fd` has without blocking.
void drain(int fd, client_view& v) {
    char buf[256];
    for (;;) {
        ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n > 0) {
            v.bytes.append(buf, size_t(n));
        } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            v.eof = true;
            return;
        } else {
            return;
        }
    }
}

/// Polls `cond()` every millisecond until it holds or `limit` passed; returns `cond()`.
template <typename Cond>
future<bool> wait_for(Cond cond, steady_clock_type::duration limit) {
    auto end = steady_clock_type::now() + limit;
    while (!cond() && steady_clock_type::now() < end) {
        co_await sleep(1ms);
    }
    co_return cond();
}

/// A loopback listener whose connections get the greeting (or, with `greet` false, an echo of
/// what they send) until the client closes.
struct greeting_server {
    server_socket ss;
    server_connections conns;
    bool greet;
    size_t open = 0;

    explicit greeting_server(bool greet_, listen_options opts = {})
        : greet(greet_) {
        ss = tcp::listen(socket_address::parse("127.0.0.1:0"), opts);
        conns.accept_from(ss, [this](connected_socket s) { return serve(std::move(s)); });
    }
    future<> serve(connected_socket s) {
        ++open;
        auto in = s.input();
        auto out = s.output();
        try {
            if (greet) {
                co_await out.write(greeting);
                co_await out.flush();
            }
            for (;;) {
                temporary_buffer b = co_await in.read();
                if (b.empty()) {
                    break;
                }
                if (!greet) {
                    co_await out.write(std::move(b));
                    co_await out.flush();
                }
            }
            co_await out.close();
        } catch (...) {
        }
        --open;
    }
    /// Checks that a fresh connection is served, and closes it.
    future<> warm_up() {
        connected_socket s = co_await tcp::connect(ss.local_address());
        auto in = s.input();
        auto out = s.output();
        if (!greet) {
            co_await out.write(greeting);
            co_await out.flush();
        }
        temporary_buffer b = co_await in.read_exactly(greeting.size());
        EXPECT_EQ(std::string_view(b.get(), b.size()), greeting);
        co_await out.close();
        EXPECT_EQ(co_await read_to_end(in), "");
    }
};

/// One connection served and closed before descriptors run out: whatever the shard's TCP stack
/// sets up on first use is in place.
future<> warm_up() {
    greeting_server srv(true);
    co_await srv.warm_up();
    co_await srv.conns.stop(5s);
}

/// The first descriptor number the clients use: well above everything open now.
int client_base() {
    auto fds = open_fds();
    return *std::max_element(fds.begin(), fds.end()) + 512;
}

} // namespace

TEST(FdExhaustion, ListenerKeepsAcceptingOnceDescriptorsAreFree) {
    if (sanitized) {
        GTEST_SKIP() << "descriptor exhaustion in-process breaks UBSan's vptr check (see above)";
    }
    int rc = run_in_shards(1, []() -> future<> {
        co_await warm_up();
        const uint64_t accepted0 = tcp::shard_stats().accepted;
        const uint64_t errors0 = tcp::shard_stats().accept_errors;
        const int base = client_base();
        clients cl(48, base);
        std::optional<greeting_server> server;
        {
            lowered_nofile lim(16, base);
            EXPECT_LT(lim.free, cl.fds.size());
            // Made under the limit: an accept request takes the limit in force when it is armed.
            greeting_server& srv = server.emplace(false);
            cl.connect_all(srv.ss.local_address());
            // The server takes what fits, then accept fails with EMFILE.
            bool exhausted =
                co_await wait_for([&] { return tcp::shard_stats().accept_errors > errors0; }, 30s);
            EXPECT_TRUE(exhausted) << "accept never ran out of descriptors";
            EXPECT_LT(tcp::shard_stats().accepted - accepted0, cl.fds.size());
            // Closing clients frees descriptors (the server sees end of stream and closes); the
            // listener must take every waiting connection then, the closed ones included. The
            // clients left open fit (the listener holds one descriptor, and a few spare).
            const size_t closing = cl.fds.size() - (lim.free - 4);
            for (size_t i = 0; i < closing; ++i) {
                cl.close(i);
            }
            bool all = co_await wait_for(
                [&] { return tcp::shard_stats().accepted - accepted0 == cl.fds.size(); }, 30s);
            EXPECT_TRUE(all) << "accepted " << tcp::shard_stats().accepted - accepted0 << " of "
                             << cl.fds.size();
            // Every client still open is served: what it sends comes back.
            std::vector<client_view> views(cl.fds.size());
            for (size_t i = closing; i < cl.fds.size(); ++i) {
                EXPECT_EQ(::send(cl.fds[i], greeting.data(), greeting.size(), MSG_NOSIGNAL),
                          ssize_t(greeting.size()));
            }
            bool echoed = co_await wait_for(
                [&] {
                    for (size_t i = closing; i < cl.fds.size(); ++i) {
                        drain(cl.fds[i], views[i]);
                        if (views[i].bytes != greeting) {
                            return false;
                        }
                    }
                    return true;
                },
                30s);
            EXPECT_TRUE(echoed);
            for (size_t i = closing; i < cl.fds.size(); ++i) {
                cl.close(i);
            }
            bool closed = co_await wait_for([&] { return srv.open == 0; }, 30s);
            EXPECT_TRUE(closed) << srv.open << " connections still open";
        }
        // A fresh connection works too.
        co_await server->warm_up();
        co_await server->conns.stop(5s);
    });
    EXPECT_EQ(rc, 0);
}

TEST(FdExhaustion, RefusalMessageThenEndOfStream) {
    if (sanitized) {
        GTEST_SKIP() << "descriptor exhaustion in-process breaks UBSan's vptr check (see above)";
    }
    int rc = run_in_shards(1, []() -> future<> {
        listen_options opts;
        opts.refusal = std::string(refusal);
        co_await warm_up();
        const uint64_t refused0 = tcp::shard_stats().refused_connections;
        const int base = client_base();
        clients cl(40, base);
        std::vector<client_view> views(cl.fds.size());
        size_t served = 0;
        size_t refused = 0;
        std::optional<greeting_server> server;
        {
            lowered_nofile lim(12, base);
            EXPECT_LT(lim.free, cl.fds.size());
            greeting_server& srv = server.emplace(true, opts);
            cl.connect_all(srv.ss.local_address());
            // Every client either is served (the greeting) or refused (the message, then EOF).
            bool decided = co_await wait_for(
                [&] {
                    served = refused = 0;
                    for (size_t i = 0; i < cl.fds.size(); ++i) {
                        drain(cl.fds[i], views[i]);
                        if (views[i].bytes == greeting && !views[i].eof) {
                            ++served;
                        } else if (views[i].bytes == refusal && views[i].eof) {
                            ++refused;
                        }
                    }
                    return served + refused == cl.fds.size();
                },
                30s);
            for (size_t i = 0; i < views.size(); ++i) {
                EXPECT_TRUE(views[i].bytes == greeting || views[i].bytes == refusal)
                    << "client " << i << " read '" << views[i].bytes << "'";
            }
            EXPECT_TRUE(decided) << served << " served, " << refused << " refused of " << cl.fds.size();
            EXPECT_GE(refused, 1u);
            EXPECT_GE(served, 1u);
            EXPECT_EQ(tcp::shard_stats().refused_connections - refused0, refused);
            EXPECT_EQ(srv.ss.refused_connections(), refused) << "the listener's own count";
            // The served ones go away: the listener is still accepting, with a reserve again.
            for (size_t i = 0; i < cl.fds.size(); ++i) {
                cl.close(i);
            }
            bool closed = co_await wait_for([&] { return srv.open == 0; }, 30s);
            EXPECT_TRUE(closed);
        }
        co_await server->warm_up();
        co_await server->conns.stop(5s);
    });
    EXPECT_EQ(rc, 0);
}

namespace {

/// A listener that fails its first `failures` accepts with `err`, then hands out connections
/// made by connecting to a real TCP listener.
class flaky_listener final : public server_socket_impl {
public:
    flaky_listener(server_socket& real, int failures, int err)
        : _real(real)
        , _failures(failures)
        , _err(err) {}
    future<accept_result> accept() override {
        if (_failures > 0) {
            --_failures;
            return make_exception_future<accept_result>(
                std::system_error(_err, std::system_category(), "accept (test)"));
        }
        return _real.accept();
    }
    void abort_accept() override { _real.abort_accept(); }
    socket_address local_address() const override { return _real.local_address(); }

private:
    server_socket& _real;
    int _failures;
    int _err;
};

} // namespace

TEST(FdExhaustion, TrackerRetriesResourceErrorsOfAnyTransport) {
    int rc = run_in_shards(1, []() -> future<> {
        server_socket real = tcp::listen(socket_address::parse("127.0.0.1:0"));
        server_socket flaky(std::make_unique<flaky_listener>(real, 5, EMFILE));
        server_connections conns;
        size_t served = 0;
        conns.accept_from(flaky, [&](connected_socket s) -> future<> {
            ++served;
            s.shutdown_output();
            return make_ready_future<>();
        });
        connected_socket c = co_await tcp::connect(real.local_address());
        bool ok = co_await wait_for([&] { return served == 1; }, 30s);
        EXPECT_TRUE(ok) << "the accept loop gave up after EMFILE";
        EXPECT_EQ(conns.accept_errors(), 5u);
        co_await conns.stop(1s);
    });
    EXPECT_EQ(rc, 0);
}

TEST(FdExhaustion, FirstReadOfAShardNeedsNoDescriptor) {
    if (sanitized) {
        GTEST_SKIP() << "descriptor exhaustion in-process breaks UBSan's vptr check (see above)";
    }
    int rc = run_in_shards(1, []() -> future<> {
        // No warm-up: nothing on this shard has read yet. The listener sets up what a read
        // needs, so a connection accepted just before descriptors ran out is served.
        const int base = client_base();
        clients cl(1, base);
        server_socket ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
        cl.connect_all(ss.local_address());
        connected_socket s = (co_await ss.accept()).connection;
        EXPECT_EQ(::send(cl.fds[0], greeting.data(), greeting.size(), MSG_NOSIGNAL),
                  ssize_t(greeting.size()));
        std::string got;
        {
            lowered_nofile lim(0, base);
            EXPECT_EQ(lim.free, 0u);
            auto in = s.input();
            try {
                temporary_buffer b = co_await in.read_exactly(greeting.size());
                got.assign(b.get(), b.size());
            } catch (const std::exception& e) {
                got = e.what();
            }
        }
        EXPECT_EQ(got, greeting);
    });
    EXPECT_EQ(rc, 0);
}
