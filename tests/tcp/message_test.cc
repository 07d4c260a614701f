// The message API over TCP (net/message.hh): length-prefixed frames keep message boundaries
// across any split of the byte stream; oversized, empty, truncated frames are clean errors.
#include "test_util.hh"

#include "core/future_util.hh"
#include "net/message.hh"

#include <array>
#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::net;
using namespace shoal::tcp_test;

TEST(Messages, FramesOverTcpKeepBoundariesAndParts) {
    int rc = run_in_shards(1, []() -> future<> {
        loopback p = co_await connect_loopback();
        message_connection a = framed_messages(std::move(p.client), 1 << 20);
        message_connection b = framed_messages(std::move(p.server), 1 << 20);
        EXPECT_EQ(a.max_message_size(), size_t(1) << 20);
        // Many messages in flight, 1 B to 1 MiB, in 1 to 9 parts: each arrives whole and alone.
        std::vector<size_t> sizes;
        for (unsigned i = 0; i < 300; ++i) {
            sizes.push_back(1 + (size_t(i) * 7919) % 5000);
        }
        sizes.push_back(1 << 20);
        sizes.push_back(65537);
        auto sender = [&]() -> future<> {
            for (size_t i = 0; i < sizes.size(); ++i) {
                temporary_buffer whole = make_pattern(sizes[i], unsigned(i));
                unsigned nparts = 1 + unsigned(i % 9);
                std::vector<temporary_buffer> parts;
                size_t off = 0;
                for (unsigned k = 0; k < nparts && off < whole.size(); ++k) {
                    size_t len =
                        k + 1 == nparts ? whole.size() - off : std::max<size_t>(1, whole.size() / nparts);
                    len = std::min(len, whole.size() - off);
                    parts.push_back(whole.share(off, len));
                    off += len;
                }
                if (off < whole.size()) {
                    parts.push_back(whole.share(off, whole.size() - off));
                }
                co_await a.send(std::span<temporary_buffer>(parts));
            }
            co_await a.close();
        };
        auto sent = sender();
        for (size_t i = 0; i < sizes.size(); ++i) {
            std::optional<temporary_buffer> m = co_await b.receive();
            EXPECT_TRUE(m) << "message " << i;
            if (!m) {
                break;
            }
            temporary_buffer want = make_pattern(sizes[i], unsigned(i));
            EXPECT_EQ(m->size(), sizes[i]) << "message " << i;
            EXPECT_TRUE(m->view() == want.view()) << "message " << i;
        }
        co_await std::move(sent);
        std::optional<temporary_buffer> end = co_await b.receive();
        EXPECT_FALSE(end) << "no end after close";
        co_await b.close();
    });
    EXPECT_EQ(rc, 0);
}

/// Collects what `receive_into` hands over, asking for the next message until the end: in a
/// loop while messages are handed over at once, from the call itself when one had to wait.
struct message_counter final : message_receiver {
    explicit message_counter(message_connection& m)
        : msgs(m) {}
    message_connection& msgs;
    std::vector<std::string> got;
    bool ended = false;
    std::exception_ptr error;
    bool in_loop = false;
    promise<> done;

    void ask() {
        in_loop = true;
        while (!ended && !error && msgs.receive_into(*this)) {
        }
        in_loop = false;
    }
    void on_message(std::optional<temporary_buffer> m) noexcept override {
        if (!m) {
            ended = true;
            done.set_value();
            return;
        }
        got.emplace_back(m->view());
        if (!in_loop) {
            ask();
        }
    }
    void on_receive_error(std::exception_ptr ex) noexcept override {
        error = ex;
        done.set_value();
    }
};

// The default `receive_into` (a transport without its own, here TCP) hands over every message
// in order and the end of stream, as `receive()` would.
TEST(Messages, ReceiveIntoHandsOverWhatReceiveWould) {
    int rc = run_in_shards(1, []() -> future<> {
        loopback p = co_await connect_loopback();
        message_connection a = framed_messages(std::move(p.client), 1 << 16);
        message_connection b = framed_messages(std::move(p.server), 1 << 16);
        message_counter r(b);
        auto done = r.done.get_future();
        r.ask(); // nothing was sent yet: it waits
        for (unsigned i = 0; i < 50; ++i) {
            co_await a.send(temporary_buffer::copy_of(std::string(1 + i * 31, char('a' + i % 26))));
        }
        co_await a.close();
        co_await with_timeout(steady_clock_type::now() + std::chrono::seconds(10), std::move(done));
        EXPECT_TRUE(r.ended);
        EXPECT_FALSE(r.error);
        EXPECT_EQ(r.got.size(), 50u);
        for (unsigned i = 0; i < r.got.size(); ++i) {
            EXPECT_EQ(r.got[i], std::string(1 + i * 31, char('a' + i % 26))) << "message " << i;
        }
        co_await b.close();
    });
    EXPECT_EQ(rc, 0);
}

TEST(Messages, BadSizesAreCleanErrors) {
    int rc = run_in_shards(1, []() -> future<> {
        loopback p = co_await connect_loopback();
        message_connection a = framed_messages(std::move(p.client), 1000);
        connected_socket raw = std::move(p.server);
        input_stream raw_in = raw.input();
        output_stream raw_out = raw.output();
        // Refused before sending: nothing reaches the peer, the connection goes on.
        bool too_big = false;
        try {
            co_await a.send(temporary_buffer(1001));
        } catch (const std::invalid_argument& e) {
            too_big = std::string(e.what()).find("1001") != std::string::npos;
        }
        EXPECT_TRUE(too_big);
        EXPECT_THROW(co_await a.send(temporary_buffer()), std::invalid_argument);
        co_await a.send(temporary_buffer::copy_of("ok"));
        temporary_buffer frame = co_await raw_in.read_exactly(6);
        EXPECT_EQ(frame.view(), std::string_view("\x02\0\0\0ok", 6))
            << "4-byte little-endian length, then the bytes";
        // A frame announcing more than the receiver's limit: an error naming both sizes.
        co_await raw_out.write(std::string_view("\xe9\x03\0\0", 4)); // 1001
        co_await raw_out.flush();
        std::string what;
        try {
            (void)co_await a.receive();
        } catch (const std::runtime_error& e) {
            what = e.what();
        }
        EXPECT_NE(what.find("1001"), std::string::npos) << what;
        EXPECT_NE(what.find("1000"), std::string::npos) << what;
        EXPECT_THROW(framed_messages(connected_socket(), 0), std::invalid_argument);
    });
    EXPECT_EQ(rc, 0);
}

TEST(Messages, AStreamEndingInsideAFrameIsUnexpectedEof) {
    int rc = run_in_shards(1, []() -> future<> {
        loopback p = co_await connect_loopback();
        message_connection a = framed_messages(std::move(p.client));
        output_stream raw_out = p.server.output();
        co_await raw_out.write(std::string_view("\x10\0\0\0short", 9)); // announces 16, sends 5
        co_await raw_out.close();
        EXPECT_THROW((void)co_await a.receive(), unexpected_eof);
    });
    EXPECT_EQ(rc, 0);
}
