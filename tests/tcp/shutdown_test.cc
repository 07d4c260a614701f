// Shutting down with connections open: the echo server's stop(), and an engine that stops
// while reads, accepts and sends are still in the ring.

#include "test_util.hh"

#include "apps/echo/echo_server.hh"
#include "core/future_util.hh"
#include "core/sharded.hh"

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::net;
using namespace shoal::tcp_test;

namespace {

/// An open, idle client: one round trip (counted in `answered`), then it waits for the server
/// to end the stream.
future<bool> idle_client(connected_socket s, int& answered) {
    auto in = s.input();
    auto out = s.output();
    co_await out.write("ping");
    co_await out.flush();
    temporary_buffer b = co_await in.read_exactly(4);
    if (b.view() != "ping") {
        co_return false;
    }
    ++answered;
    temporary_buffer end = co_await in.read(); // resolves when the server shuts down
    co_return end.empty();
}

future<> stop_server_with_open_connections() {
    sharded<echo::echo_server> servers;
    co_await servers.start(net::make_transport("tcp"));
    co_await servers.invoke_on_all(
        [](echo::echo_server& s) { s.start(socket_address::parse("127.0.0.1:0")); });
    auto addr = servers.local().local_address();
    std::vector<future<bool>> clients;
    int answered = 0;
    for (int i = 0; i < 20; ++i) {
        clients.push_back(idle_client(co_await tcp::connect(addr), answered));
    }
    // Wait until every client got its ping back (the server counts a connection when it accepts
    // it, before the ping is answered: stopping then would end a stream the test expects to
    // have echoed), then stop it.
    auto deadline = steady_clock_type::now() + std::chrono::seconds(30);
    while (answered < 20 && steady_clock_type::now() < deadline) {
        co_await sleep(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(answered, 20);
    co_await servers.stop();
    auto ends = co_await when_all_succeed(std::move(clients));
    for (bool clean : ends) {
        EXPECT_TRUE(clean);
    }
}

/// Never finishes on its own: waits for input that never comes.
future<> hang_reading(connected_socket s, int& failures) {
    auto in = s.input();
    try {
        co_await in.read();
    } catch (const std::system_error&) {
        ++failures; // the engine cancelled the read on its way out
    }
}

future<> hang_sending(connected_socket s) {
    auto out = s.output();
    try {
        for (;;) {
            co_await out.write(std::string(1 << 20, 's')); // nobody reads: the window fills
        }
    } catch (const std::system_error&) {
    }
}

future<> hang_accepting(server_socket ss, int& failures) {
    try {
        co_await ss.accept();
    } catch (const std::system_error&) {
        ++failures;
    }
}

} // namespace

TEST(TcpShutdown, EchoServerStopsWithConnectionsOpen) {
    EXPECT_EQ(run_in_shards(2, stop_server_with_open_connections), 0);
}

TEST(TcpShutdown, EngineStopsWithIoInFlight) {
    // The body returns while reads, an accept and blocked sends are in the ring; the engine
    // cancels them, the waiting coroutines see errors and finish, nothing leaks (LSan) and
    // nothing hangs.
    int read_failures = 0;
    int accept_failures = 0;
    // Client ends of the sending connections: never read, kept past the engine (closing a
    // socket with no request in the ring needs no reactor).
    std::vector<connected_socket> silent;
    int rc = run_in_shards(1, [&]() -> future<> {
        auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
        auto addr = ss.local_address();
        for (int i = 0; i < 4; ++i) {
            // Both ends read, nobody writes.
            auto accepted = ss.accept();
            connected_socket c = co_await tcp::connect(addr);
            accept_result ar = co_await std::move(accepted);
            (void)hang_reading(std::move(c), read_failures);
            (void)hang_reading(std::move(ar.connection), read_failures);
            // The server end writes until the window is full, nobody reads.
            accepted = ss.accept();
            silent.push_back(co_await tcp::connect(addr));
            ar = co_await std::move(accepted);
            (void)hang_sending(std::move(ar.connection));
        }
        (void)hang_accepting(std::move(ss), accept_failures);
        co_await yield();
    });
    silent.clear();
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(read_failures, 8);
    EXPECT_EQ(accept_failures, 1);
}
