// Many connections, half-close, shutdown of the input, socket options and addresses.

#include "test_util.hh"

#include "apps/echo/echo_server.hh"
#include "core/future_util.hh"
#include "core/sharded.hh"

#include <gtest/gtest.h>

#include <string>

using namespace shoal;
using namespace shoal::net;
using namespace shoal::tcp_test;

namespace {

/// One client of the many-connections test: sends its own message, checks the echo.
future<> one_client(connected_socket s, unsigned id, unsigned& ok) {
    auto in = s.input();
    auto out = s.output();
    std::string msg = "client " + std::to_string(id) + " " + std::string(id % 97, 'x');
    co_await out.write(msg);
    co_await out.flush();
    temporary_buffer echoed = co_await in.read_exactly(msg.size());
    co_await out.close();
    temporary_buffer end = co_await in.read(); // the server closes after our close
    if (echoed.view() == msg && end.empty() && in.eof()) {
        ++ok;
    }
}

future<> thousand_connections() {
    constexpr unsigned n = 1000;
    sharded<echo::echo_server> server;
    co_await server.start(net::make_transport("tcp"));
    server.local().start(socket_address::parse("127.0.0.1:0"));
    auto addr = server.local().local_address();
    // All connects at once, then all exchanges at once: 1000 open connections on one server.
    std::vector<future<connected_socket>> connecting;
    for (unsigned i = 0; i < n; ++i) {
        connecting.push_back(tcp::connect(addr));
    }
    auto sockets = co_await when_all_succeed(std::move(connecting));
    unsigned ok = 0;
    std::vector<future<>> clients;
    for (unsigned i = 0; i < n; ++i) {
        clients.push_back(one_client(std::move(sockets[i]), i, ok));
    }
    co_await when_all_succeed(std::move(clients));
    EXPECT_EQ(ok, n);
    EXPECT_EQ(server.local().connections(), n);
    EXPECT_EQ(server.local().errors(), 0u);
    co_await server.stop();
}

future<> half_close_server(server_socket& ss, std::string& seen) {
    accept_result ar = co_await ss.accept();
    auto in = ar.connection.input();
    auto out = ar.connection.output();
    seen = co_await read_to_end(in); // ends when the client shuts its output down
    co_await out.write("reply to: " + seen);
    co_await out.close();
}

future<> half_close() {
    auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
    std::string seen;
    auto served = half_close_server(ss, seen);
    connected_socket s = co_await tcp::connect(ss.local_address());
    auto in = s.input();
    auto out = s.output();
    co_await out.write("question");
    co_await out.flush();
    s.shutdown_output(); // the server sees end of stream, we can still read
    std::string reply = co_await read_to_end(in);
    co_await std::move(served);
    EXPECT_EQ(seen, "question");
    EXPECT_EQ(reply, "reply to: question");
    // Writing after shutdown_output fails.
    bool failed = false;
    try {
        co_await out.write(std::string(10000, 'z'));
        co_await out.flush();
    } catch (const std::system_error& e) {
        failed = true;
        EXPECT_EQ(e.code().value(), EPIPE);
    }
    EXPECT_TRUE(failed);
}

future<> output_close_is_half_close() {
    // output_stream::close() sends FIN but keeps the input open.
    auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
    std::string seen;
    auto served = half_close_server(ss, seen);
    connected_socket s = co_await tcp::connect(ss.local_address());
    auto in = s.input();
    auto out = s.output();
    co_await out.write(std::string(300000, 'q'));
    co_await out.close();
    std::string reply = co_await read_to_end(in);
    co_await std::move(served);
    EXPECT_EQ(seen.size(), 300000u);
    EXPECT_EQ(reply.size(), 300000u + 10);
}

future<> shutdown_input_ends_pending_read() {
    auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
    auto accepted = ss.accept();
    connected_socket s = co_await tcp::connect(ss.local_address());
    accept_result ar = co_await std::move(accepted);
    auto in = s.input();
    auto pending = in.read(); // nothing will arrive
    s.shutdown_input();
    temporary_buffer b = co_await std::move(pending);
    EXPECT_TRUE(b.empty());
    EXPECT_TRUE(in.eof());
    temporary_buffer again = co_await in.read();
    EXPECT_TRUE(again.empty());
}

future<> options_and_addresses(socket_address bind_to) {
    auto ss = tcp::listen(bind_to);
    auto accepted = ss.accept();
    connected_socket c = co_await tcp::connect(ss.local_address());
    accept_result ar = co_await std::move(accepted);
    connected_socket& s = ar.connection;
    EXPECT_TRUE(c.get_nodelay()); // tcp::config::nodelay
    EXPECT_TRUE(s.get_nodelay()); // inherited from the listener
    c.set_nodelay(false);
    EXPECT_FALSE(c.get_nodelay());
    EXPECT_FALSE(s.get_keepalive());
    s.set_keepalive(true);
    EXPECT_TRUE(s.get_keepalive());
    EXPECT_EQ(c.peer_address(), ss.local_address());
    EXPECT_EQ(s.local_address(), ss.local_address());
    EXPECT_EQ(c.local_address(), s.peer_address());
    EXPECT_EQ(ar.remote_address, s.peer_address());
    EXPECT_EQ(c.local_address().family(), bind_to.family());
    // Each direction is taken once.
    auto in = c.input();
    EXPECT_THROW(c.input(), std::logic_error);
}

future<> connect_from_a_local_address() {
    auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
    auto accepted = ss.accept();
    tcp::connect_options co;
    co.local = socket_address::parse("127.0.0.2:0"); // any 127/8 address is loopback
    connected_socket c = co_await tcp::connect(ss.local_address(), co);
    accept_result ar = co_await std::move(accepted);
    EXPECT_EQ(c.local_address().host(), "127.0.0.2");
    EXPECT_EQ(ar.remote_address.host(), "127.0.0.2");
}

future<> read_exactly_across_writes() {
    auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
    auto accepted = ss.accept();
    connected_socket c = co_await tcp::connect(ss.local_address());
    accept_result ar = co_await std::move(accepted);
    auto out = c.output();
    auto in = ar.connection.input();
    // Three separate sends; the reader asks for sizes that straddle them.
    for (const char* piece : {"abc", "defgh", "ijklmnop"}) {
        co_await out.write(piece);
        co_await out.flush();
    }
    co_await out.close();
    EXPECT_EQ((co_await in.read_exactly(2)).view(), "ab");
    EXPECT_EQ((co_await in.read_exactly(5)).view(), "cdefg");
    EXPECT_EQ((co_await in.read_exactly(9)).view(), "hijklmnop");
    bool eof_thrown = false;
    try {
        co_await in.read_exactly(1);
    } catch (const unexpected_eof&) {
        eof_thrown = true;
    }
    EXPECT_TRUE(eof_thrown);
}

future<> slow_acceptor() {
    // Backlog 16: the listener queues at most 16 accepted connections for the application,
    // then leaves the rest in the kernel's queue until the application catches up.
    listen_options lo;
    lo.backlog = 16;
    auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"), lo);
    auto addr = ss.local_address();
    auto before = tcp::shard_stats().accepted;
    auto first = ss.accept(); // arms the multishot accept
    std::vector<connected_socket> clients;
    clients.push_back(co_await tcp::connect(addr));
    co_await std::move(first);
    for (int i = 0; i < 24; ++i) {
        clients.push_back(co_await tcp::connect(addr));
    }
    for (int i = 0; i < 24; ++i) {
        accept_result ar = co_await ss.accept();
        EXPECT_TRUE(ar.connection);
    }
    EXPECT_EQ(tcp::shard_stats().accepted - before, 25u);
}

} // namespace

TEST(TcpConnections, SlowAcceptorDoesNotLoseConnections) {
    EXPECT_EQ(run_in_shards(1, slow_acceptor), 0);
}

TEST(TcpConnections, ThousandConcurrentConnectionsOnOneServer) {
    ASSERT_GE(raise_nofile(4096), 2100u) << "cannot open enough files";
    EXPECT_EQ(run_in_shards(1, thousand_connections), 0);
}

TEST(TcpConnections, HalfClose) {
    EXPECT_EQ(run_in_shards(1, half_close), 0);
}

TEST(TcpConnections, OutputCloseKeepsInputOpen) {
    EXPECT_EQ(run_in_shards(1, output_close_is_half_close), 0);
}

TEST(TcpConnections, ShutdownInputEndsPendingRead) {
    EXPECT_EQ(run_in_shards(1, shutdown_input_ends_pending_read), 0);
}

TEST(TcpConnections, OptionsAndAddressesIPv4) {
    EXPECT_EQ(run_in_shards(1, [] { return options_and_addresses(socket_address::parse("127.0.0.1:0")); }),
              0);
}

TEST(TcpConnections, OptionsAndAddressesIPv6) {
    EXPECT_EQ(run_in_shards(1, [] { return options_and_addresses(socket_address::parse("[::1]:0")); }), 0);
}

TEST(TcpConnections, ConnectFromALocalAddress) {
    EXPECT_EQ(run_in_shards(1, connect_from_a_local_address), 0);
}

TEST(TcpConnections, ReadExactlyAcrossSends) {
    EXPECT_EQ(run_in_shards(1, read_exactly_across_writes), 0);
}
