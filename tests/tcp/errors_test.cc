// Errors: refused connections, addresses in use, bad address strings, a peer that resets.

#include "test_util.hh"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace shoal;
using namespace shoal::net;
using namespace shoal::tcp_test;

namespace {

/// A port on `host` that nothing listens on: a socket bound to it (not listening) holds it.
struct closed_port {
    int fd = -1;
    socket_address addr;
    explicit closed_port(const char* host) {
        auto a = socket_address::parse(std::string(host) + ":0");
        fd = ::socket(a.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
        ::bind(fd, a.as_sockaddr(), a.length());
        sockaddr_storage ss{};
        socklen_t len = sizeof(ss);
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
        addr = socket_address(reinterpret_cast<sockaddr*>(&ss), len);
    }
    ~closed_port() { ::close(fd); }
};

future<> expect_refused(socket_address addr) {
    bool refused = false;
    try {
        co_await tcp::connect(addr);
    } catch (const std::system_error& e) {
        refused = true;
        EXPECT_EQ(e.code().value(), ECONNREFUSED);
        EXPECT_EQ(std::string(e.what()), "connect " + addr.to_string() + ": Connection refused");
    }
    EXPECT_TRUE(refused);
}

/// Blocking POSIX client of the reset test, run on its own thread.
bool blocking_exchange(int fd, const std::string& msg) {
    if (::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL) != ssize_t(msg.size())) {
        return false;
    }
    std::string back(msg.size(), '\0');
    size_t got = 0;
    while (got < back.size()) {
        ssize_t r = ::recv(fd, back.data() + got, back.size() - got, 0);
        if (r <= 0) {
            return false;
        }
        got += size_t(r);
    }
    return back == msg;
}

int blocking_connect(const socket_address& addr) {
    int fd = ::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval tv{30, 0}; // a safety net only; ctest's timeout bounds the test anyway
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (::connect(fd, addr.as_sockaddr(), addr.length()) < 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

/// The client: a round trip, then bytes and a reset (SO_LINGER 0); then a second, normal client.
void reset_client(socket_address addr, std::atomic<int>& result) {
    int fd = blocking_connect(addr);
    if (fd < 0 || !blocking_exchange(fd, "hello")) {
        result = 1;
        return;
    }
    std::string partial(1000, 'p');
    ::send(fd, partial.data(), partial.size(), MSG_NOSIGNAL);
    linger lg{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    ::close(fd); // RST
    int fd2 = blocking_connect(addr);
    bool ok = fd2 >= 0 && blocking_exchange(fd2, "still there?");
    if (fd2 >= 0) {
        ::close(fd2);
    }
    result = ok ? 0 : 2;
}

/// Server side of the reset test: echo "hello", then only read until something happens.
future<> read_until_error(connected_socket s, std::exception_ptr& error, size_t& bytes_after) {
    auto in = s.input();
    auto out = s.output();
    temporary_buffer hello = co_await in.read_exactly(5);
    co_await out.write(std::move(hello));
    co_await out.flush();
    try {
        for (;;) {
            temporary_buffer b = co_await in.read();
            if (b.empty()) {
                break; // a clean end of stream: the test fails below
            }
            bytes_after += b.size();
        }
    } catch (...) {
        error = std::current_exception();
    }
}

} // namespace

TEST(TcpErrors, ConnectTimeout) {
    // A listener that never accepts and has a backlog of one: once its queue is full the kernel
    // drops further SYNs, so a connect can only end by its timeout (the outcome does not depend
    // on how long anything takes).
    int rc = run_in_shards(1, []() -> future<> {
        listen_options lo;
        lo.backlog = 1;
        auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"), lo);
        auto addr = ss.local_address();
        tcp::connect_options co;
        co.timeout = std::chrono::milliseconds(200);
        std::vector<connected_socket> queued;
        bool timed_out = false;
        for (int i = 0; i < 10 && !timed_out; ++i) {
            try {
                queued.push_back(co_await tcp::connect(addr, co));
            } catch (const std::system_error& e) {
                timed_out = true;
                EXPECT_EQ(e.code().value(), ETIMEDOUT);
                EXPECT_EQ(std::string(e.what()), "connect " + addr.to_string() + ": Connection timed out");
            }
        }
        EXPECT_TRUE(timed_out);
        EXPECT_GE(queued.size(), 1u);
    });
    EXPECT_EQ(rc, 0);
}

TEST(TcpErrors, ConnectRefusedIPv4) {
    closed_port p("127.0.0.1");
    EXPECT_EQ(run_in_shards(1, [&] { return expect_refused(p.addr); }), 0);
}

TEST(TcpErrors, ConnectRefusedIPv6) {
    closed_port p("::1");
    EXPECT_EQ(run_in_shards(1, [&] { return expect_refused(p.addr); }), 0);
}

TEST(TcpErrors, AddressInUse) {
    int rc = run_in_shards(1, []() -> future<> {
        auto first = tcp::listen(socket_address::parse("127.0.0.1:0"));
        auto addr = first.local_address();
        try {
            auto second = tcp::listen(addr);
            ADD_FAILURE() << "second listen succeeded";
        } catch (const std::system_error& e) {
            EXPECT_EQ(e.code().value(), EADDRINUSE);
            EXPECT_EQ(std::string(e.what()), "listen " + addr.to_string() + ": Address already in use");
        }
        co_return;
    });
    EXPECT_EQ(rc, 0);
}

TEST(TcpErrors, BadAddressStrings) {
    for (const char* bad :
         {"300.1.2.3:80", "127.0.0.1:99999", "[::1", "[::1]80", "example.com:80", "1.2.3.4:8x"}) {
        SCOPED_TRACE(bad);
        try {
            socket_address::parse(bad);
            ADD_FAILURE() << "parsed";
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find("address"), std::string::npos) << e.what();
        }
    }
    EXPECT_EQ(socket_address::parse("[::1]:80").to_string(), "[::1]:80");
    EXPECT_EQ(socket_address::parse("localhost:80").to_string(), "127.0.0.1:80");
    EXPECT_EQ(socket_address::parse("10.0.0.1", 9).to_string(), "10.0.0.1:9");
}

TEST(TcpErrors, PeerResetMidStreamFailsTheReaderAndTheServerGoesOn) {
    std::atomic<int> client_result{-1};
    std::thread client;
    std::exception_ptr error;
    size_t bytes_after = 0;
    int rc = run_in_shards(1, [&]() -> future<> {
        auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
        client = std::thread(reset_client, ss.local_address(), std::ref(client_result));
        accept_result first = co_await ss.accept();
        co_await read_until_error(std::move(first.connection), error, bytes_after);
        // The server keeps serving: the same listener takes the next client.
        accept_result second = co_await ss.accept();
        auto err = co_await echo(std::move(second.connection));
        EXPECT_FALSE(err);
    });
    client.join();
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(client_result.load(), 0);
    ASSERT_TRUE(error) << "the reader saw a clean end of stream after " << bytes_after << " bytes";
    try {
        std::rethrow_exception(error);
    } catch (const std::system_error& e) {
        EXPECT_EQ(e.code().value(), ECONNRESET) << e.what();
        EXPECT_NE(std::string(e.what()).find("recv 127.0.0.1:"), std::string::npos) << e.what();
    }
    EXPECT_LE(bytes_after, 1000u);
}

TEST(TcpErrors, WritingToAResetPeerFails) {
    std::thread client;
    int rc = run_in_shards(1, [&]() -> future<> {
        auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
        auto addr = ss.local_address();
        client = std::thread([addr] {
            int fd = blocking_connect(addr);
            char c;
            ::recv(fd, &c, 1, 0); // wait for the server's first byte
            linger lg{1, 0};
            ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
            ::close(fd);
        });
        accept_result ar = co_await ss.accept();
        auto out = ar.connection.output();
        auto in = ar.connection.input();
        co_await out.write("x");
        co_await out.flush();
        // The peer resets after that byte: reading fails, and so do writes sooner or later.
        bool read_failed = false;
        try {
            co_await in.read();
        } catch (const std::system_error& e) {
            read_failed = true;
            EXPECT_EQ(e.code().value(), ECONNRESET);
        }
        EXPECT_TRUE(read_failed);
        bool write_failed = false;
        try {
            for (int i = 0; i < 1000; ++i) {
                co_await out.write(std::string(65536, 'w'));
                co_await out.flush();
            }
            co_await out.close();
        } catch (const std::system_error& e) {
            write_failed = true;
            EXPECT_TRUE(e.code().value() == EPIPE || e.code().value() == ECONNRESET) << e.what();
        }
        EXPECT_TRUE(write_failed);
    });
    client.join();
    EXPECT_EQ(rc, 0);
}
