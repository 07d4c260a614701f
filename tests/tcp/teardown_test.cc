// Connections that break at any point free themselves: a reset or a half-close of the peer
// during a read, with received bytes queued, with a send in flight, after the application let
// go with output still queued, and while receives wait for an empty buffer ring. After each,
// the process is back at its open descriptors and the reactor at its io_uring requests in
// flight. Also what an idle connection costs: its queues allocate nothing until used, the
// gathering block goes back after a flush, and armed receives do not spread over the ring.
// Loopback only, bounded; the clients are plain blocking sockets (loopback connects and small
// sends never block).
#include "core/timer.hh"
#include "net/tcp/internal.hh"
#include "net/tcp/send_buffers.hh"
#include "test_util.hh"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::net;
using namespace std::chrono_literals;
using shoal::tcp_test::open_fds;
using shoal::tcp_test::run_in_shards;

namespace {

/// A client end: a blocking socket connected to `addr` (the listener's backlog takes it).
int raw_connect(const socket_address& addr) {
    int fd = ::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || ::connect(fd, addr.as_sockaddr(), addr.length()) < 0) {
        throw std::system_error(errno, std::system_category(), "test client connect");
    }
    // A small receive buffer: the server's sends fill it (and park) after a few hundred KB.
    int small = 4096;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    return fd;
}

void raw_send(int fd, std::string_view bytes) {
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
}

/// Closes with a reset (SO_LINGER 0): unsent bytes are dropped, the peer gets RST.
void raw_reset(int fd) {
    linger lg{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    ::close(fd);
}

/// The io_uring requests this shard has handed to the ring: those the kernel holds and those
/// still queued for the next submission. A completion that re-arms (the wake-up read, say)
/// queues its new request before the loop submits it, so in-flight requests alone would
/// depend on when they are counted.
uint64_t requests_held() {
    reactor& r = local_reactor();
    return r.io_in_flight() + io_uring_sq_ready(&r.ring());
}

/// The process and reactor state a freed connection returns to.
struct baseline {
    size_t fds = open_fds();
    uint64_t in_flight = requests_held();
};

/// Waits (bounded, generously) until descriptors and io_uring requests are back at `b`, then
/// checks them.
future<> expect_back_at(const baseline& b, const char* what) {
    for (int i = 0; i < 3000 && (open_fds() != b.fds || requests_held() != b.in_flight); ++i) {
        co_await sleep(10ms);
    }
    EXPECT_EQ(open_fds(), b.fds) << what;
    EXPECT_EQ(requests_held(), b.in_flight) << what;
}

/// A listener with its receive ring already set up (one connection received once) and a reactor
/// that has slept once, so that the baseline counts the ring's and the wake-up's resident
/// requests.
future<server_socket> warm_listener() {
    auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
    int fd = raw_connect(ss.local_address());
    accept_result ar = co_await ss.accept();
    raw_send(fd, "warm");
    auto in = ar.connection.input();
    co_await in.read();
    ::close(fd);
    co_await in.read(); // end of stream
    // The reactor's wake-up read is resident from its first sleep on. A 1 ms timer on a loaded
    // host can expire while the reactor still polls, so wait for a sleep that happened.
    const uint64_t slept = local_reactor().stats().sleeps;
    while (local_reactor().stats().sleeps == slept) {
        co_await sleep(1ms);
    }
    co_return ss;
}

/// True when `f` fails (consumes the exception).
future<bool> fails(future<> f) {
    try {
        co_await std::move(f);
    } catch (...) {
        co_return true;
    }
    co_return false;
}

constexpr int rounds = 20;

/// A client connected to `ss` (a plain socket) and the connection the server accepted for it.
struct client_and_server {
    int fd;
    connected_socket server;
};

future<client_and_server> accept_client(server_socket& ss) {
    int fd = raw_connect(ss.local_address());
    accept_result ar = co_await ss.accept();
    co_return client_and_server{fd, std::move(ar.connection)};
}

/// Runs `round(listener, i)` `n` times on a warm listener, then expects the process and the
/// reactor back at their baseline (`what` names the case in failures). Returns `run`'s code.
int run_rounds(int n, const char* what, std::function<future<>(server_socket&, int)> round) {
    return run_in_shards(1, [&]() -> future<> {
        auto ss = co_await warm_listener();
        baseline b;
        for (int i = 0; i < n; ++i) {
            co_await round(ss, i);
        }
        co_await expect_back_at(b, what);
    });
}

} // namespace

TEST(TcpTeardown, ResetDuringAReadFailsItAndFreesTheConnection) {
    int rc = run_rounds(rounds, "reset during a read", [](server_socket& ss, int) -> future<> {
        auto [fd, s] = co_await accept_client(ss);
        auto in = s.input();
        auto out = s.output();
        raw_send(fd, "set x 0 0 100\r\nabc");
        auto first = co_await in.read();
        EXPECT_FALSE(first.empty());
        auto pending = in.read(); // waiting in the kernel when the reset lands
        raw_reset(fd);
        bool failed = false;
        try {
            auto more = co_await std::move(pending);
            while (!more.empty()) {
                more = co_await in.read();
            }
        } catch (...) {
            failed = true;
        }
        EXPECT_TRUE(failed || in.eof());
    });
    EXPECT_EQ(rc, 0);
}

TEST(TcpTeardown, ResetWithBytesQueuedAndNobodyReadingFreesTheConnection) {
    int rc = run_rounds(rounds, "reset with unread bytes", [](server_socket& ss, int i) -> future<> {
        auto [fd, s] = co_await accept_client(ss);
        auto in = s.input();
        raw_send(fd, "get a b c\r\n");
        co_await in.read(); // the receive is re-armed; the next bytes queue up unread
        raw_send(fd, std::string(3000, 'q'));
        co_await sleep(1ms);
        raw_reset(fd);
        if (i % 2) {
            co_await sleep(1ms); // the reset reaches the connection before it is dropped
        }
        // The application lets go without reading what is queued.
    });
    EXPECT_EQ(rc, 0);
}

TEST(TcpTeardown, ResetDuringABlockedSendFailsTheWriterAndFreesTheConnection) {
    int rc = run_rounds(rounds, "reset during a send", [](server_socket& ss, int) -> future<> {
        auto [fd, s] = co_await accept_client(ss);
        auto out = s.output();
        // More than the send window, to a client that does not read: the writer waits.
        auto writing = [&]() -> future<> {
            std::string chunk(256 * 1024, 'w');
            for (int k = 0; k < 64; ++k) {
                co_await out.write(chunk);
            }
            co_await out.flush();
        };
        auto w = writing();
        co_await sleep(2ms);
        EXPECT_FALSE(w.available());
        raw_reset(fd);
        EXPECT_TRUE(co_await fails(std::move(w)));
    });
    EXPECT_EQ(rc, 0);
}

TEST(TcpTeardown, AConnectionLetGoWithOutputQueuedLingersUntilThePeerResets) {
    int rc = run_in_shards(1, []() -> future<> {
        auto ss = co_await warm_listener();
        baseline b;
        std::vector<int> clients;
        for (int i = 0; i < rounds; ++i) {
            int fd = raw_connect(ss.local_address());
            clients.push_back(fd);
            accept_result ar = co_await ss.accept();
            auto in = ar.connection.input();
            auto out = ar.connection.output();
            raw_send(fd, "get big\r\n");
            co_await in.read();
            // A reply larger than the client's socket buffer, handed over without waiting (it
            // fits the send window), then the application lets go: the send goes on.
            co_await out.write(std::string(600 * 1024, 'r'));
            co_await out.flush();
            if (i % 2) {
                ar.connection.shutdown_output();
            }
        }
        co_await sleep(5ms);
        EXPECT_GT(open_fds(), b.fds); // still sending to clients that do not read
        for (size_t i = 0; i < clients.size(); ++i) {
            if (i % 2) {
                ::shutdown(clients[i], SHUT_WR); // a half-close first, then a close with unread
            }                                    // bytes (a reset)
            if (i % 3) {
                raw_reset(clients[i]);
            } else {
                ::close(clients[i]);
            }
        }
        co_await expect_back_at(b, "teardown with output queued");
    });
    EXPECT_EQ(rc, 0);
}

TEST(TcpTeardown, HalfCloseThenResetWhileTheServerRepliesFreesTheConnection) {
    int rc = run_rounds(
        rounds / 2, "half-close, then a reset during the reply", [](server_socket& ss, int) -> future<> {
            auto [fd, s] = co_await accept_client(ss);
            auto in = s.input();
            auto out = s.output();
            raw_send(fd, "get a\r\n");
            ::shutdown(fd, SHUT_WR);
            std::string got;
            for (;;) {
                auto buf = co_await in.read();
                if (buf.empty()) {
                    break;
                }
                got.append(buf.view());
            }
            EXPECT_EQ(got, "get a\r\n");
            // The reply is larger than both socket buffers hold, so the send is still in flight
            // when the client's close() (with unread bytes: a reset) lands.
            auto closing = [&]() -> future<> {
                co_await out.write(std::string(8 << 20, 'v')); // the server's send buffer: 4 MB at most
                co_await out.close();
            };
            auto c = closing();
            co_await sleep(1ms);
            ::close(fd);
            EXPECT_TRUE(co_await fails(std::move(c)));
        });
    EXPECT_EQ(rc, 0);
}

TEST(TcpTeardown, ResetsWhileReceivesWaitForAnEmptyRingFreeEveryConnection) {
    tcp::config cfg;
    cfg.recv_buffers = 4; // a tiny ring: receives run out of buffers and wait for them
    cfg.ring_depth = 1;
    cfg.copy_below = 1;
    tcp_test::scoped_config scoped(cfg);
    uint64_t shortages = 0;
    int rc = run_in_shards(1, [&]() -> future<> {
        auto ss = co_await warm_listener();
        baseline b;
        uint64_t before = tcp::shard_stats().buffer_shortages;
        for (int r = 0; r < 5; ++r) {
            std::vector<int> fds;
            std::vector<input_stream> ins;
            std::vector<future<temporary_buffer>> reads;
            std::vector<temporary_buffer> held; // readers that keep their buffers drain the ring
            for (int i = 0; i < 16; ++i) {
                fds.push_back(raw_connect(ss.local_address()));
                accept_result ar = co_await ss.accept();
                ins.push_back(ar.connection.input());
            }
            for (auto& in : ins) {
                reads.push_back(in.read());
            }
            for (int fd : fds) {
                raw_send(fd, std::string(20000, 'd'));
            }
            co_await sleep(5ms); // some receives got bytes, others wait for buffers
            for (size_t i = 0; i < fds.size(); ++i) {
                if (i % 2) {
                    raw_reset(fds[i]);
                } else {
                    ::shutdown(fds[i], SHUT_WR);
                    ::close(fds[i]);
                }
            }
            for (auto& f : reads) {
                try {
                    held.push_back(co_await std::move(f)); // kept until every read is over
                } catch (...) {
                }
            }
        }
        shortages = tcp::shard_stats().buffer_shortages - before;
        co_await expect_back_at(b, "resets while waiting for buffers");
    });
    EXPECT_EQ(rc, 0);
    EXPECT_GT(shortages, 0u) << "the ring never ran empty: the waiting path was not exercised";
}

TEST(TcpTeardown, BufferQueueHoldsNoMemoryUntilUsedAndKeepsOrder) {
    using tcp::internal::buffer_queue;
    buffer_queue q;
    EXPECT_EQ(q.memory(), 0u);
    for (int round = 0; round < 3; ++round) {
        for (int i = 0; i < 3; ++i) {
            q.push_back(temporary_buffer::copy_of(std::to_string(i)));
        }
        EXPECT_EQ(q.memory(), buffer_queue::first_slots * sizeof(temporary_buffer));
        for (int i = 0; i < 3; ++i) {
            EXPECT_EQ(q.front().view(), std::to_string(i));
            q.pop_front();
        }
        // A few slots stay for the next request: no allocation per request.
        EXPECT_EQ(q.memory(), buffer_queue::first_slots * sizeof(temporary_buffer));
    }
    for (int i = 0; i < 100; ++i) {
        q.push_back(temporary_buffer::copy_of(std::to_string(i)));
    }
    EXPECT_EQ(q.size(), 100u);
    for (int i = 0; i < 100; ++i) {
        EXPECT_EQ(q[size_t(i)].view(), std::to_string(i));
    }
    for (int i = 0; i < 100; ++i) {
        EXPECT_EQ(q.front().view(), std::to_string(i));
        q.pop_front();
    }
    EXPECT_TRUE(q.empty());
    EXPECT_EQ(q.memory(), 0u); // a large array goes back once the burst is over
    q.push_back(temporary_buffer::copy_of("x"));
    q.clear();
    EXPECT_EQ(q.memory(), 0u);
}

TEST(TcpTeardown, AnIdleConnectionKeepsNoGatheringBlock) {
    int rc = run_in_shards(1, []() -> future<> {
        auto lb = co_await tcp_test::connect_loopback();
        auto out = lb.server.output();
        auto in = lb.client.input();
        co_await out.write("VERSION 1.6\r\n"); // a gathering block is taken from the cache
        size_t cached = tcp::internal::cached_send_buffers();
        co_await out.flush();
        auto got = co_await in.read();
        EXPECT_EQ(got.view(), "VERSION 1.6\r\n");
        // Once sent, the block is back in the shard's cache: the idle connection holds none.
        for (int i = 0; i < 1000 && tcp::internal::cached_send_buffers() != cached + 1; ++i) {
            co_await sleep(1ms);
        }
        EXPECT_EQ(tcp::internal::cached_send_buffers(), cached + 1);
        co_await out.write("again\r\n"); // and the next reply takes it again
        EXPECT_EQ(tcp::internal::cached_send_buffers(), cached);
        co_await out.close();
    });
    EXPECT_EQ(rc, 0);
}

TEST(TcpTeardown, IdleArmedReceivesDoNotSpreadOverTheRing) {
    int rc = run_in_shards(1, []() -> future<> {
        const unsigned depth = tcp::get_config().ring_depth;
        auto ss = co_await warm_listener();
        std::vector<int> fds;
        std::vector<input_stream> ins;
        std::vector<future<temporary_buffer>> reads;
        ins.reserve(200); // pending reads refer to their stream: it must not move
        for (int i = 0; i < 200; ++i) {
            fds.push_back(raw_connect(ss.local_address()));
            accept_result ar = co_await ss.accept();
            ins.push_back(ar.connection.input());
            reads.push_back(ins.back().read()); // 200 receives armed at once
        }
        // One small request at a time, each read and dropped before the next: the buffers used
        // come from a few ring entries, not one per armed receive (which would make all of the
        // pool resident on a server with many idle connections).
        std::set<const char*> used;
        for (size_t i = 0; i < fds.size(); ++i) {
            raw_send(fds[i], "version\r\n");
            auto b = co_await std::move(reads[i]);
            EXPECT_EQ(b.view(), "version\r\n");
            used.insert(b.get());
        }
        EXPECT_LE(used.size(), size_t(depth) + 2);
        for (int fd : fds) {
            ::close(fd);
        }
        for (auto& in : ins) {
            co_await in.read(); // end of stream
        }
    });
    EXPECT_EQ(rc, 0);
}
