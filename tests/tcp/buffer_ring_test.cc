// The provided-buffer ring under pressure: readers that keep buffers, a ring smaller than the
// traffic, readers that fall behind.

#include "test_util.hh"

#include "core/future_util.hh"
#include "core/smp.hh"

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::net;
using namespace shoal::tcp_test;

namespace {

future<> send_pattern(server_socket& ss, size_t size, unsigned seed) {
    accept_result ar = co_await ss.accept();
    auto out = ar.connection.output();
    co_await out.write(make_pattern(size, seed));
    co_await out.close();
}

future<> hold_every_buffer(size_t size) {
    auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
    auto sent = send_pattern(ss, size, 3);
    connected_socket c = co_await tcp::connect(ss.local_address());
    auto in = c.input();
    auto before = tcp::shard_stats();
    std::vector<temporary_buffer> kept; // the reader never gives a buffer back
    size_t got = 0;
    bool same = true;
    for (;;) {
        temporary_buffer b = co_await in.read();
        if (b.empty()) {
            break;
        }
        for (size_t i = 0; i < b.size(); ++i) {
            same &= b[i] == pattern_byte(got + i, 3);
        }
        got += b.size();
        kept.push_back(std::move(b));
    }
    co_await std::move(sent);
    auto after = tcp::shard_stats();
    EXPECT_EQ(got, size);
    EXPECT_TRUE(same);
    // 16 buffers, copies below 4 left: at most 12 are ever lent to the reader, the rest copied.
    EXPECT_LE(after.zero_copy_buffers - before.zero_copy_buffers, 12u);
    EXPECT_GT(after.copied_buffers - before.copied_buffers, 0u);
    EXPECT_GT(kept.size(), 12u);
}

future<> echo_client(socket_address addr, size_t size, unsigned seed, bool slow, unsigned& ok) {
    connected_socket s = co_await tcp::connect(addr);
    auto in = s.input();
    auto out = s.output();
    auto written = out.write(make_pattern(size, seed)).then([&out] { return out.close(); });
    size_t got = 0;
    bool same = true;
    for (;;) {
        temporary_buffer b = co_await in.read();
        if (b.empty()) {
            break;
        }
        for (size_t i = 0; i < b.size(); ++i) {
            same &= b[i] == pattern_byte(got + i, seed);
        }
        got += b.size();
        if (slow) {
            co_await yield(); // let data pile up behind us
        }
    }
    co_await std::move(written);
    if (got == size && same) {
        ++ok;
    }
}

future<> serve_echo(server_socket& ss, unsigned n) {
    std::vector<future<std::exception_ptr>> served;
    for (unsigned i = 0; i < n; ++i) {
        accept_result ar = co_await ss.accept();
        served.push_back(echo(std::move(ar.connection)));
    }
    for (auto& f : served) {
        EXPECT_FALSE(co_await std::move(f));
    }
}

future<> many_connections_tiny_ring(bool slow) {
    constexpr unsigned n = 32;
    auto before = tcp::shard_stats();
    auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
    auto served = serve_echo(ss, n);
    unsigned ok = 0;
    std::vector<future<>> clients;
    for (unsigned i = 0; i < n; ++i) {
        clients.push_back(echo_client(ss.local_address(), 64 * 1024 + i * 100, i, slow, ok));
    }
    co_await when_all_succeed(std::move(clients));
    co_await std::move(served);
    EXPECT_EQ(ok, n);
    auto after = tcp::shard_stats();
    ::testing::Test::RecordProperty("buffer_shortages",
                                    int(after.buffer_shortages - before.buffer_shortages));
    ::testing::Test::RecordProperty("recv_paused", int(after.recv_paused - before.recv_paused));
    ::testing::Test::RecordProperty("copied_buffers", int(after.copied_buffers - before.copied_buffers));
}

/// On shard 1: receives "hello" into shard 1's ring and returns the buffer (zero copy).
future<temporary_buffer> receive_on_shard_1() {
    auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
    auto accepted = ss.accept();
    connected_socket c = co_await tcp::connect(ss.local_address());
    accept_result ar = co_await std::move(accepted);
    auto out = c.output();
    co_await out.write("hello");
    co_await out.close();
    auto in = ar.connection.input();
    temporary_buffer b = co_await in.read_exactly(5);
    co_return b;
}

future<> buffer_goes_home() {
    auto before = co_await submit_to(1, [] { return tcp::shard_stats().zero_copy_buffers; });
    temporary_buffer b = co_await submit_to(1, [] { return receive_on_shard_1(); });
    EXPECT_EQ(b.view(), "hello");
    auto after = co_await submit_to(1, [] { return tcp::shard_stats().zero_copy_buffers; });
    EXPECT_EQ(after - before, 1u); // the bytes are still in shard 1's ring
    b.reset();                     // dropped on shard 0: the buffer goes back to shard 1's ring
    co_await submit_to(1, [] {});  // after the recycle message
}

} // namespace

TEST(TcpBufferRing, BufferDroppedOnAnotherShardGoesHome) {
    EXPECT_EQ(run_in_shards(2, buffer_goes_home), 0);
}

TEST(TcpBufferRing, ReaderHoldingBuffersGetsCopiesOnceTheRingRunsLow) {
    tcp::config c;
    c.recv_buffers = 16;
    c.recv_buffer_size = 4096;
    c.copy_below = 4;
    scoped_config sc(c);
    EXPECT_EQ(run_in_shards(1, [] { return hold_every_buffer(1 << 20); }), 0);
}

TEST(TcpBufferRing, TinyRingManyConnections) {
    // 64 KB echoed on 32 connections at once through 8 buffers of 1 KB: the ring runs dry
    // (ENOBUFS) and receives wait for buffers to come back.
    tcp::config c;
    c.recv_buffers = 8;
    c.recv_buffer_size = 1024;
    c.copy_below = 2;
    scoped_config sc(c);
    EXPECT_EQ(run_in_shards(1, [] { return many_connections_tiny_ring(false); }), 0);
}

TEST(TcpBufferRing, SlowReadersPauseReceiving) {
    // Readers that fall behind more than max_unread stop their receive until they catch up.
    tcp::config c;
    c.recv_buffers = 64;
    c.recv_buffer_size = 2048;
    c.max_unread = 8192;
    scoped_config sc(c);
    EXPECT_EQ(run_in_shards(1, [] { return many_connections_tiny_ring(true); }), 0);
}
