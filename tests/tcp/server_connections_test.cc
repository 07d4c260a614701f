// net::server_connections over TCP: a server stops in bounded time while a client sends and never
// reads (its writes are blocked), and a client that reads still gets every byte when the drain
// finishes in time.

#include "test_util.hh"

#include "core/future_util.hh"
#include "core/timer.hh"
#include "net/server_connections.hh"

#include <chrono>
#include <optional>

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::net;
using namespace shoal::tcp_test;
using namespace std::chrono_literals;

namespace {

/// An echo handler that records what the test waits for: bytes read, and since when a write
/// has been waiting (for the send window, when the peer does not read).
struct echo_probe {
    uint64_t received = 0;
    std::optional<steady_clock_type::time_point> write_waiting_since;
    bool ended_with_error = false;

    /// True when a write has been waiting for `at_least`: the window is really full. (A write
    /// can also be pending for a moment because the task quota ran out; that is not blocking.)
    bool write_blocked(steady_clock_type::duration at_least) const {
        return write_waiting_since && steady_clock_type::now() - *write_waiting_since >= at_least;
    }

    future<> serve(connected_socket s) {
        auto in = s.input();
        auto out = s.output();
        try {
            for (;;) {
                temporary_buffer b = co_await in.read();
                if (b.empty()) {
                    break;
                }
                received += b.size();
                auto written = out.write(std::move(b));
                if (!written.available()) {
                    write_waiting_since = steady_clock_type::now();
                }
                co_await std::move(written);
                auto flushed = out.flush();
                if (!flushed.available() && !write_waiting_since) {
                    write_waiting_since = steady_clock_type::now();
                }
                co_await std::move(flushed);
                write_waiting_since.reset();
            }
            co_await out.close();
        } catch (...) {
            ended_with_error = true;
        }
    }
};

/// A listener on loopback whose connections a tracker serves with an `echo_probe`.
struct probed_server {
    server_socket ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
    server_connections conns;
    echo_probe probe;

    probed_server() {
        conns.accept_from(ss, [this](connected_socket s) { return probe.serve(std::move(s)); });
    }
    /// A client connected to it.
    future<connected_socket> connect() { return tcp::connect(ss.local_address()); }
};

/// Waits (polling every millisecond) until `cond()` or `limit` passed; returns `cond()`.
template <typename Cond>
future<bool> wait_for(Cond cond, steady_clock_type::duration limit) {
    auto deadline = steady_clock_type::now() + limit;
    while (!cond() && steady_clock_type::now() < deadline) {
        co_await sleep(1ms);
    }
    co_return cond();
}

/// Writes 64 KB chunks until told to stop or the connection fails; never reads.
future<> flood(output_stream& out, const bool& stop) {
    temporary_buffer chunk = make_pattern(64 << 10);
    try {
        while (!stop) {
            co_await out.write(chunk.share());
            co_await out.flush();
        }
    } catch (...) {
        // The server aborted the connection: expected.
    }
}

future<> stop_with_a_client_that_never_reads() {
    probed_server server;
    auto& conns = server.conns;
    auto& probe = server.probe;
    connected_socket c = co_await server.connect();
    auto out = c.output();
    bool stop_flooding = false;
    auto flooding = flood(out, stop_flooding);
    bool blocked = co_await wait_for([&] { return probe.write_blocked(100ms); }, 60s);
    EXPECT_TRUE(blocked) << "the server's writes never blocked (" << probe.received << " bytes read)";
    EXPECT_EQ(conns.open(), 1u);

    const auto drain = 200ms;
    auto start = steady_clock_type::now();
    bool stopped = true;
    try {
        co_await with_timeout(steady_clock_type::now() + 30s, conns.stop(drain));
    } catch (const timed_out_error&) {
        stopped = false;
    }
    auto took = steady_clock_type::now() - start;
    EXPECT_TRUE(stopped) << "stop() did not finish within 30 s";
    EXPECT_GE(took, drain) << "aborted before the drain deadline";
    EXPECT_EQ(conns.aborted(), 1u);
    EXPECT_EQ(conns.open(), 0u);
    EXPECT_TRUE(probe.ended_with_error);
    EXPECT_GE(tcp::shard_stats().aborts, 1u);

    stop_flooding = true;
    c.abort(); // the client's own blocked write ends too
    co_await std::move(flooding);
}

/// Writes `size` bytes of the pattern in 64 KB pieces, then waits.
future<> write_all(output_stream& out, size_t size) {
    temporary_buffer all = make_pattern(size);
    for (size_t off = 0; off < size; off += 64 << 10) {
        co_await out.write(all.share(off, std::min<size_t>(64 << 10, size - off)));
    }
    co_await out.flush();
}

future<> a_reading_client_gets_everything() {
    constexpr size_t size = 4 << 20;
    probed_server server;
    auto& conns = server.conns;
    auto& probe = server.probe;
    connected_socket c = co_await server.connect();
    auto in = c.input();
    auto out = c.output();
    size_t mismatch = 0;
    auto reading = read_and_check(in, size + 1, 1, mismatch); // +1: must see the end of stream
    co_await write_all(out, size);
    // Stop once the server has read every byte (its echo may still be on the way).
    bool all_in = co_await wait_for([&] { return probe.received == size; }, 60s);
    EXPECT_TRUE(all_in) << probe.received;
    co_await with_timeout(steady_clock_type::now() + 60s, conns.stop(30s));
    size_t got = co_await std::move(reading);
    EXPECT_EQ(got, size);
    EXPECT_EQ(mismatch, SIZE_MAX) << "first wrong byte at " << mismatch;
    EXPECT_TRUE(in.eof());
    EXPECT_EQ(conns.aborted(), 0u);
    EXPECT_FALSE(probe.ended_with_error);
    co_await out.close();
}

future<> stop_without_connections_and_add_after_stop() {
    auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
    auto addr = ss.local_address();
    server_connections conns;
    int served = 0;
    conns.accept_from(ss, [&served](connected_socket) {
        ++served;
        return make_ready_future<>();
    });
    co_await conns.stop(10s); // only the accept loop: ends at once, no waiting for the drain
    EXPECT_TRUE(conns.stopping());
    // The listener is closed: connecting fails or the connection is never served.
    try {
        connected_socket late = co_await tcp::connect(addr);
        EXPECT_FALSE(conns.add(std::move(late), [&served](connected_socket) {
            ++served;
            return make_ready_future<>();
        }));
    } catch (const std::system_error&) {
    }
    EXPECT_EQ(served, 0);
    EXPECT_EQ(conns.served(), 0u);
}

future<> zero_drain_aborts_at_once() {
    probed_server server;
    auto& conns = server.conns;
    connected_socket c = co_await server.connect();
    auto in = c.input();
    EXPECT_TRUE(co_await wait_for([&] { return conns.open() == 1; }, 60s));
    // An idle connection would end cleanly by itself after shutdown_input: with no drain time it is
    // aborted instead, and the client sees the connection reset (or an end of stream).
    co_await with_timeout(steady_clock_type::now() + 30s, conns.stop(0s));
    EXPECT_EQ(conns.aborted(), 1u);
    EXPECT_EQ(conns.open(), 0u);
    try {
        temporary_buffer b = co_await in.read();
        EXPECT_TRUE(b.empty());
    } catch (const std::system_error&) {
    }
}

} // namespace

TEST(ServerConnections, StopsInBoundedTimeWhileAClientDoesNotRead) {
    EXPECT_EQ(run_in_shards(1, stop_with_a_client_that_never_reads), 0);
}

TEST(ServerConnections, AReadingClientGetsEveryByteWhenTheDrainCompletes) {
    EXPECT_EQ(run_in_shards(1, a_reading_client_gets_everything), 0);
}

TEST(ServerConnections, StopWithoutConnectionsAndAddAfterStop) {
    EXPECT_EQ(run_in_shards(1, stop_without_connections_and_add_after_stop), 0);
}

TEST(ServerConnections, ZeroDrainAbortsAtOnce) {
    EXPECT_EQ(run_in_shards(1, zero_drain_aborts_at_once), 0);
}
