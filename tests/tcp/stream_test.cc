// The transport-neutral stream API (net/stream.hh) over an in-memory source and sink.

#include "test_util.hh"

#include "core/future_util.hh"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

using namespace shoal;
using namespace shoal::net;
using namespace shoal::tcp_test;

namespace {

/// Hands out the given pieces, then end of stream.
class pieces_source final : public data_source_impl {
public:
    explicit pieces_source(std::vector<std::string> pieces) {
        for (auto& p : pieces) {
            _pieces.push_back(temporary_buffer::copy_of(p));
        }
    }
    future<temporary_buffer> get() override {
        if (_pieces.empty()) {
            _eof = true;
            return make_ready_future<temporary_buffer>();
        }
        auto b = std::move(_pieces.front());
        _pieces.pop_front();
        return make_ready_future<temporary_buffer>(std::move(b));
    }

private:
    std::deque<temporary_buffer> _pieces;
};

/// Records what it is given.
class recording_sink final : public data_sink_impl {
public:
    explicit recording_sink(std::vector<std::string>& puts, std::vector<const char*>& addrs, bool& closed)
        : _puts(puts)
        , _addrs(addrs)
        , _closed(closed) {}
    future<> put(temporary_buffer buf) override {
        _addrs.push_back(buf.get());
        _puts.emplace_back(buf.view());
        return make_ready_future<>();
    }
    future<> close() override {
        _closed = true;
        return make_ready_future<>();
    }
    size_t buffer_size_hint() const noexcept override { return 16; }

private:
    std::vector<std::string>& _puts;
    std::vector<const char*>& _addrs;
    bool& _closed;
};

/// Records what it is given, but each put completes only when the test says so.
class slow_sink final : public data_sink_impl {
public:
    explicit slow_sink(std::vector<std::string>& puts, std::deque<promise<>>& pending)
        : _puts(puts)
        , _pending(pending) {}
    future<> put(temporary_buffer buf) override {
        _puts.emplace_back(buf.view());
        _pending.emplace_back();
        return _pending.back().get_future();
    }
    future<> close() override { return make_ready_future<>(); }
    size_t buffer_size_hint() const noexcept override { return 16; }

private:
    std::vector<std::string>& _puts;
    std::deque<promise<>>& _pending;
};

} // namespace

TEST(StreamApi, WriteCopiesTheCallersBytesBeforeReturning) {
    // A write that spills over the gathering buffer waits for the sink; the caller's bytes
    // must not be needed after write() returned.
    std::vector<std::string> puts;
    std::deque<promise<>> pending;
    int rc = run_in_shards(1, [&]() -> future<> {
        output_stream out(std::make_unique<slow_sink>(puts, pending));
        co_await out.write("0123456789"); // 10 of 16 bytes gathered
        future<> f = make_ready_future<>();
        {
            std::string caller(20, 'a');
            for (size_t i = 0; i < caller.size(); ++i) {
                caller[i] = char('a' + i);
            }
            f = out.write(caller);                        // fills the buffer, the sink holds the put
            std::fill(caller.begin(), caller.end(), '#'); // then the caller reuses its memory
        }
        EXPECT_FALSE(f.available());
        EXPECT_EQ(pending.size(), 1u);
        // Let the sink complete its puts one by one until the write is done, then flush.
        auto drive = [&pending](future<>& op) -> future<> {
            while (!op.available()) {
                if (!pending.empty()) {
                    pending.front().set_value();
                    pending.pop_front();
                }
                co_await yield();
            }
        };
        co_await drive(f);
        co_await std::move(f);
        future<> flushed = out.flush();
        co_await drive(flushed);
        co_await std::move(flushed);
    });
    EXPECT_EQ(rc, 0);
    std::string all;
    for (const auto& p : puts) {
        all += p;
    }
    EXPECT_EQ(all, "0123456789abcdefghijklmnopqrst");
}

TEST(StreamApi, DefaultConstructedOutputStreamFailsCleanly) {
    int rc = run_in_shards(1, []() -> future<> {
        output_stream out;
        bool failed = false;
        try {
            co_await out.write("x");
        } catch (const std::logic_error&) {
            failed = true;
        }
        EXPECT_TRUE(failed);
        failed = false;
        try {
            co_await out.flush();
        } catch (const std::logic_error&) {
            failed = true;
        }
        EXPECT_TRUE(failed);
        co_await out.close(); // nothing to close: fine
    });
    EXPECT_EQ(rc, 0);
}

TEST(StreamApi, InputReadExactlyReadUpToUnread) {
    int rc = run_in_shards(1, []() -> future<> {
        input_stream in(std::make_unique<pieces_source>(std::vector<std::string>{"hel", "lo wo", "rld"}));
        auto a = co_await in.read_exactly(2); // within the first piece: a slice, no copy
        EXPECT_EQ(a.view(), "he");
        auto b = co_await in.read_exactly(5); // spans two pieces
        EXPECT_EQ(b.view(), "llo w");
        auto c = co_await in.read_up_to(1);
        EXPECT_EQ(c.view(), "o");
        in.unread(temporary_buffer::copy_of("O"));
        auto d = co_await in.read();
        EXPECT_EQ(d.view(), "O");
        auto e = co_await in.read();
        EXPECT_EQ(e.view(), "rld");
        EXPECT_FALSE(in.eof());
        auto f = co_await in.read();
        EXPECT_TRUE(f.empty());
        EXPECT_TRUE(in.eof());
        bool thrown = false;
        try {
            co_await in.read_exactly(1);
        } catch (const unexpected_eof&) {
            thrown = true;
        }
        EXPECT_TRUE(thrown);
    });
    EXPECT_EQ(rc, 0);
}

TEST(StreamApi, OutputGathersSmallWritesAndPassesLargeBuffersThrough) {
    std::vector<std::string> puts;
    std::vector<const char*> addrs;
    bool closed = false;
    int rc = run_in_shards(1, [&]() -> future<> {
        output_stream out(std::make_unique<recording_sink>(puts, addrs, closed));
        co_await out.write("abc");
        co_await out.write("defghijklmnop"); // 16 bytes gathered: handed over
        EXPECT_EQ(puts.size(), 1u);
        co_await out.write("xy");
        co_await out.flush();
        EXPECT_EQ(puts.size(), 2u);
        temporary_buffer big = make_pattern(1000);
        const char* big_data = big.get();
        co_await out.write(std::move(big)); // large: passed through without a copy
        EXPECT_EQ(addrs.back(), big_data);
        co_await out.close();
    });
    EXPECT_EQ(rc, 0);
    ASSERT_EQ(puts.size(), 3u);
    EXPECT_EQ(puts[0], "abcdefghijklmnop");
    EXPECT_EQ(puts[1], "xy");
    EXPECT_EQ(puts[2].size(), 1000u);
    EXPECT_TRUE(closed);
}

TEST(StreamApi, TemporaryBufferSlicesShareMemory) {
    temporary_buffer b = temporary_buffer::copy_of("hello world");
    temporary_buffer s = b.share(6, 5);
    EXPECT_EQ(s.view(), "world");
    EXPECT_EQ(s.get(), b.get() + 6);
    b.reset(); // the slice keeps the memory alive
    EXPECT_EQ(s.view(), "world");
}
