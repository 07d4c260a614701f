// Loopback echo over TCP: sizes from 1 byte to 16 MB, IPv4 and IPv6.

#include "test_util.hh"

#include "core/future_util.hh"

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::net;
using namespace shoal::tcp_test;

namespace {

/// Serves one connection with `echo`, then stops listening.
future<> serve_one(server_socket& ss, std::exception_ptr& server_error) {
    accept_result ar = co_await ss.accept();
    server_error = co_await echo(std::move(ar.connection));
}

/// Writes `size` bytes of the pattern (in pieces of at most `chunk`), then closes the output.
future<> write_pattern(output_stream& out, size_t size, size_t chunk, unsigned seed) {
    temporary_buffer all = make_pattern(size, seed);
    for (size_t off = 0; off < size; off += chunk) {
        size_t n = std::min(chunk, size - off);
        co_await out.write(all.share(off, n));
    }
    co_await out.close();
}

future<> echo_once(socket_address bind_to, size_t size, size_t chunk) {
    auto ss = tcp::listen(bind_to);
    auto addr = ss.local_address();
    std::exception_ptr server_error;
    auto served = serve_one(ss, server_error);
    connected_socket s = co_await tcp::connect(addr);
    auto in = s.input();
    auto out = s.output();
    unsigned seed = unsigned(size % 251);
    auto written = write_pattern(out, size, chunk, seed);
    size_t mismatch = 0;
    size_t got = co_await read_and_check(in, size + 1, seed, mismatch); // +1: must see EOF
    co_await std::move(written);
    co_await std::move(served);
    EXPECT_EQ(got, size);
    EXPECT_EQ(mismatch, SIZE_MAX) << "first wrong byte at " << mismatch;
    EXPECT_FALSE(server_error) << "server failed";
    EXPECT_TRUE(in.eof());
}

} // namespace

TEST(TcpEcho, SizesFromOneByteTo16MB) {
    const size_t sizes[] = {1, 2, 100, 4096, 65536 + 3, 1 << 20, 16 << 20};
    for (size_t size : sizes) {
        SCOPED_TRACE(size);
        EXPECT_EQ(run_in_shards(
                      1, [size] { return echo_once(socket_address::parse("127.0.0.1:0"), size, 1 << 20); }),
                  0);
    }
}

TEST(TcpEcho, ManySmallWrites) {
    EXPECT_EQ(run_in_shards(1, [] { return echo_once(socket_address::parse("127.0.0.1:0"), 200000, 7); }), 0);
}

TEST(TcpEcho, IPv6Loopback) {
    EXPECT_EQ(run_in_shards(1, [] { return echo_once(socket_address::parse("[::1]:0"), 100000, 1000); }), 0);
}
