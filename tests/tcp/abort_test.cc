// Cancelling TCP operations with an abort_source: accept, connect and reads fail at once with the
// abort's reason, the io_uring request is cancelled, nothing leaks, and what can stay usable
// does (a listener keeps accepting, a connection keeps reading). Loopback only, bounded.
#include "core/abort_source.hh"
#include "core/timer.hh"
#include "net/tcp/tcp.hh"
#include "net/transport.hh"
#include "test_util.hh"

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::net;
using namespace std::chrono_literals;
using shoal::tcp_test::open_fds;
using shoal::tcp_test::run_in_shards;

namespace {

/// True when `f` failed with abort_requested_exception (consumes the exception).
template <typename T>
bool failed_with_abort(future<T>& f) {
    if (!f.available() || !f.failed()) {
        return false;
    }
    try {
        std::rethrow_exception(f.get_exception());
    } catch (const abort_requested_exception&) {
        return true;
    } catch (...) {
        return false;
    }
}

/// A loopback connection whose client output feeds the server input.
struct loopback {
    server_socket listener;
    connected_socket client;
    connected_socket server;
    input_stream in;   // the server's input
    output_stream out; // the client's output
};

future<loopback> connect_loopback() {
    loopback l;
    l.listener = tcp::listen(socket_address::parse("127.0.0.1:0"));
    l.client = co_await tcp::connect(l.listener.local_address());
    auto accepted = co_await l.listener.accept();
    l.server = std::move(accepted.connection);
    l.in = l.server.input();
    l.out = l.client.output();
    co_return l;
}

/// Appends plain reads to `got` until it holds `n` bytes; stops early at end of stream.
future<std::string> read_into(input_stream& in, std::string got, size_t n) {
    while (got.size() < n) {
        auto b = co_await in.read();
        if (b.empty()) {
            break;
        }
        got.append(b.get(), b.size());
    }
    co_return got;
}

/// Waits (bounded) until the process has `fds` descriptors open again.
future<size_t> settle_fds(size_t fds) {
    for (int i = 0; i < 200 && open_fds() != fds; ++i) {
        co_await sleep(10ms);
    }
    co_return open_fds();
}

} // namespace

TEST(TcpAbort, AcceptFailsAtOnceAndTheListenerStaysUsable) {
    int rc = run_in_shards(1, []() -> future<> {
        auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
        auto addr = ss.local_address();
        for (int round = 0; round < 3; ++round) {
            abort_source as;
            auto f = ss.accept(as);
            co_await sleep(5ms); // the multishot accept is in the kernel now
            EXPECT_FALSE(f.available());
            as.request_abort();
            EXPECT_TRUE(failed_with_abort(f)) << "round " << round;
        }
        // Still listening: a client connects, and a plain accept gets it.
        auto client = co_await tcp::connect(addr);
        auto accepted = co_await ss.accept();
        EXPECT_TRUE(bool(accepted.connection));
        // And an abortable accept that is not aborted works too.
        abort_source unused;
        auto client2 = co_await tcp::connect(addr);
        auto accepted2 = co_await ss.accept(unused);
        EXPECT_TRUE(bool(accepted2.connection));
    });
    EXPECT_EQ(rc, 0);
}

TEST(TcpAbort, AcceptWithAnAbortedSourceFailsWithoutTakingAConnection) {
    int rc = run_in_shards(1, []() -> future<> {
        auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
        auto client = co_await tcp::connect(ss.local_address());
        abort_source as;
        as.request_abort_ex(std::runtime_error("deadline passed"));
        auto f = ss.accept(as);
        EXPECT_TRUE(f.available() && f.failed());
        try {
            std::rethrow_exception(f.get_exception());
        } catch (const std::runtime_error& e) {
            EXPECT_EQ(std::string(e.what()), "deadline passed"); // the abort's own reason
        }
        auto accepted = co_await ss.accept(); // the waiting connection was not consumed
        EXPECT_TRUE(bool(accepted.connection));
    });
    EXPECT_EQ(rc, 0);
}

TEST(TcpAbort, ConnectFailsAtOnceAndClosesItsSocket) {
    // A listener that never accepts, backlog 1: once its queue is full the kernel drops SYNs,
    // so a connect stays pending until it is aborted (as in TcpErrors.ConnectTimeout).
    int rc = run_in_shards(1, []() -> future<> {
        listen_options lo;
        lo.backlog = 1;
        auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"), lo);
        auto addr = ss.local_address();
        std::vector<connected_socket> queued;
        bool aborted = false;
        for (int i = 0; i < 10 && !aborted; ++i) {
            size_t fds = open_fds();
            abort_source as;
            auto f = tcp::connect(addr, {}, as);
            co_await sleep(100ms);
            if (f.available()) {
                queued.push_back(co_await std::move(f)); // the queue is not full yet
                continue;
            }
            as.request_abort();
            EXPECT_TRUE(failed_with_abort(f));
            aborted = true;
            // The cancelled request completes, then its socket is closed.
            EXPECT_EQ(co_await settle_fds(fds), fds);
        }
        EXPECT_TRUE(aborted);
        // An already-aborted source makes no socket at all.
        abort_source done;
        done.request_abort();
        size_t fds = open_fds();
        auto f = tcp::connect(addr, {}, done);
        EXPECT_TRUE(failed_with_abort(f));
        EXPECT_EQ(open_fds(), fds);
    });
    EXPECT_EQ(rc, 0);
}

TEST(TcpAbort, ReadFailsAtOnceAndTheConnectionKeepsItsBytes) {
    int rc = run_in_shards(1, []() -> future<> {
        auto conn = co_await connect_loopback();
        auto& in = conn.in;
        auto& out = conn.out;
        for (int round = 0; round < 3; ++round) {
            abort_source as;
            auto f = in.read(as);
            co_await sleep(5ms); // the receive is in the kernel now
            EXPECT_FALSE(f.available());
            uint64_t arms = tcp::shard_stats().recv_arms;
            as.request_abort();
            EXPECT_TRUE(failed_with_abort(f)) << "round " << round;
            // The receive was cancelled: the next read arms a new one.
            co_await sleep(5ms);
            auto again = in.read();
            EXPECT_EQ(tcp::shard_stats().recv_arms, arms + 1) << "round " << round;
            // The connection still works: bytes sent after the abort reach the next read.
            std::string msg = "after abort " + std::to_string(round);
            co_await out.write(msg);
            co_await out.flush();
            auto first = co_await std::move(again);
            std::string got = co_await read_into(in, std::string(first.get(), first.size()), msg.size());
            EXPECT_EQ(got, msg);
        }
        // Bytes already received and an aborted source: the read fails, nothing is consumed.
        co_await out.write(std::string_view("queued"));
        co_await out.flush();
        co_await sleep(20ms);
        abort_source done;
        done.request_abort();
        auto f = in.read(done);
        EXPECT_TRUE(failed_with_abort(f));
        std::string got = co_await read_into(in, {}, 6);
        EXPECT_EQ(got, "queued");
        // End of stream still arrives as usual.
        co_await out.close();
        auto end = co_await in.read();
        EXPECT_TRUE(end.empty());
    });
    EXPECT_EQ(rc, 0);
}

TEST(TcpAbort, DestroyingTheSourceAfterTheReadFinishedIsHarmless) {
    // The subscription ends with the read: a source aborted (or destroyed) afterwards touches
    // nothing.
    int rc = run_in_shards(1, []() -> future<> {
        auto conn = co_await connect_loopback();
        auto& in = conn.in;
        auto& out = conn.out;
        temporary_buffer b;
        {
            abort_source as;
            auto f = in.read(as);
            co_await out.write(std::string_view("x"));
            co_await out.flush();
            b = co_await std::move(f);
            as.request_abort(); // too late: nothing happens
        }
        EXPECT_EQ(std::string(b.get(), b.size()), "x");
        co_await out.write(std::string_view("y"));
        co_await out.flush();
        auto c = co_await in.read();
        EXPECT_EQ(std::string(c.get(), c.size()), "y");
    });
    EXPECT_EQ(rc, 0);
}

TEST(TcpAbort, ReadExactlyAndReadUpToAbortedPartWayLoseNoBytes) {
    int rc = run_in_shards(1, []() -> future<> {
        auto conn = co_await connect_loopback();
        auto& in = conn.in;
        auto& out = conn.out;
        co_await out.write("0123");
        co_await out.flush();
        abort_source as;
        auto f = in.read_exactly(10, as);
        co_await sleep(20ms); // "0123" gathered, waiting for the rest
        EXPECT_FALSE(f.available());
        as.request_abort();
        bool aborted = false;
        try {
            (void)co_await std::move(f); // fails at the next task, "0123" put back first
        } catch (const abort_requested_exception&) {
            aborted = true;
        }
        EXPECT_TRUE(aborted);
        co_await out.write("456789");
        co_await out.flush();
        auto b = co_await in.read_exactly(10);
        EXPECT_EQ(std::string(b.get(), b.size()), "0123456789");
        // An already-aborted source consumes nothing.
        co_await out.write("abc");
        co_await out.flush();
        auto up = in.read_up_to(2, as);
        EXPECT_TRUE(failed_with_abort(up));
        auto got = co_await read_into(in, "", 3);
        EXPECT_EQ(got, "abc");
    });
    EXPECT_EQ(rc, 0);
}

TEST(TcpAbort, TheTransportConnectIsAbortable) {
    int rc = run_in_shards(1, []() -> future<> {
        net::transport t = net::make_transport("tcp");
        auto ss = t.listen(socket_address::parse("127.0.0.1:0"), {});
        auto addr = ss.local_address();
        abort_source done;
        done.request_abort();
        size_t fds = open_fds();
        auto f = t.connect_abortable(addr, done);
        EXPECT_TRUE(failed_with_abort(f));
        EXPECT_EQ(open_fds(), fds);
        abort_source as;
        auto s = co_await t.connect_abortable(addr, as);
        auto accepted = co_await ss.accept();
        auto out = s.output();
        auto in = accepted.connection.input();
        co_await out.write("x");
        co_await out.flush();
        EXPECT_EQ(co_await read_into(in, "", 1), "x");
    });
    EXPECT_EQ(rc, 0);
}
