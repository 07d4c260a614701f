// Copies per message on the output path: output_stream gathers into memory the sink
// allocates and hands slices of it over without another copy; write() of several buffers hands
// them over as they are, in one put_many (over TCP: one sendmsg).

#include "test_util.hh"

#include "core/future_util.hh"
#include "net/tcp/send_buffers.hh"

#include <array>
#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::net;
using namespace shoal::tcp_test;

namespace {

/// A sink whose memory is one arena, so the test can tell whether `put` got the memory the
/// stream gathered into; records every put and put_many.
class arena_sink final : public data_sink_impl {
public:
    struct record {
        std::vector<std::string> puts;
        std::vector<const char*> addrs;
        unsigned put_many_calls = 0;
        unsigned allocations = 0;
    };
    arena_sink(record& r, std::vector<char>& arena)
        : _r(r)
        , _arena(arena) {}
    future<> put(temporary_buffer buf) override {
        _r.addrs.push_back(buf.get());
        _r.puts.emplace_back(buf.view());
        return make_ready_future<>();
    }
    future<> put_many(std::span<temporary_buffer> bufs) override {
        ++_r.put_many_calls;
        for (auto& b : bufs) {
            (void)put(std::move(b));
        }
        return make_ready_future<>();
    }
    temporary_buffer allocate_buffer(size_t size) override {
        ++_r.allocations;
        if (_next + size > _arena.size()) {
            return temporary_buffer(size);
        }
        char* p = _arena.data() + _next;
        _next += size;
        return temporary_buffer(p, size, nullptr); // arena memory: no owner
    }
    future<> close() override { return make_ready_future<>(); }
    size_t buffer_size_hint() const noexcept override { return 64; }

private:
    record& _r;
    std::vector<char>& _arena;
    size_t _next = 0;
};

bool in(const std::vector<char>& arena, const char* p) {
    return p >= arena.data() && p < arena.data() + arena.size();
}

/// Reads until `n` bytes arrived; returns them.
future<std::string> read_n(input_stream& in, size_t n) {
    std::string got;
    while (got.size() < n) {
        temporary_buffer b = co_await in.read();
        if (b.empty()) {
            break;
        }
        got.append(b.get(), b.size());
    }
    co_return got;
}

future<> small_messages_cost_one_copy() {
    constexpr int messages = 200;
    constexpr size_t size = 128;
    loopback lb = co_await connect_loopback();
    auto out = lb.client.output();
    auto in = lb.server.input();
    std::string expected;
    uint64_t worst = 0;
    uint64_t total = 0;
    for (int i = 0; i < messages; ++i) {
        std::string msg(size, char('a' + i % 26));
        expected += msg;
        uint64_t before = stream_copies().copies;
        co_await out.write(msg);
        co_await out.flush();
        uint64_t copies = stream_copies().copies - before;
        worst = std::max(worst, copies);
        total += copies;
        // The reader takes each message before the next is written (no reads copy: read()).
        std::string got = co_await read_n(in, size);
        EXPECT_EQ(got, msg);
    }
    EXPECT_LE(worst, 1u) << "a small message was copied more than once";
    EXPECT_EQ(total, uint64_t(messages)); // the one copy: the caller's bytes into the sink's buffer
    co_await out.close();
}

future<> header_and_payload_leave_in_one_send() {
    constexpr int messages = 100;
    constexpr size_t header_size = 16;
    constexpr size_t payload_size = 1000;
    loopback lb = co_await connect_loopback();
    auto out = lb.client.output();
    auto in = lb.server.input();
    temporary_buffer payload = make_pattern(payload_size, 3);
    const auto& st = tcp::shard_stats();
    uint64_t copies_before = stream_copies().copies;
    uint64_t sends_before = st.sends;
    uint64_t vectored_before = st.vectored_sends;
    uint64_t short_before = st.short_sends;
    for (int i = 0; i < messages; ++i) {
        std::string header = "header:" + std::to_string(10000000 + i) + ";"; // 16 bytes
        EXPECT_EQ(header.size(), header_size);
        std::array<temporary_buffer, 2> parts{temporary_buffer::copy_of(header), payload.share()};
        co_await out.write(std::span<temporary_buffer>(parts));
        co_await out.flush();
        EXPECT_TRUE(parts[0].empty() && parts[1].empty()) << "write() did not take the buffers";
        std::string got = co_await read_n(in, header_size + payload_size);
        EXPECT_EQ(got, header + std::string(payload.view()));
    }
    uint64_t short_sends = st.short_sends - short_before;
    EXPECT_EQ(stream_copies().copies - copies_before, 0u);
    // One sendmsg of two iovecs per message (a short send, unlikely on loopback, adds one).
    EXPECT_EQ(st.sends - sends_before, messages + short_sends);
    EXPECT_GE(st.vectored_sends - vectored_before + short_sends, uint64_t(messages));
    co_await out.close();
}

} // namespace

TEST(ZeroCopy, OutputGathersIntoTheSinksMemoryAndPutsSlicesOfIt) {
    arena_sink::record r;
    std::vector<char> arena(1 << 16);
    int rc = run_in_shards(1, [&]() -> future<> {
        output_stream out(std::make_unique<arena_sink>(r, arena));
        uint64_t before = stream_copies().copies;
        for (int i = 0; i < 10; ++i) {
            co_await out.write("0123456789");
            co_await out.flush();
        }
        EXPECT_EQ(stream_copies().copies - before, 10u);
        co_await out.close();
    });
    EXPECT_EQ(rc, 0);
    ASSERT_EQ(r.puts.size(), 10u);
    for (size_t i = 0; i < r.puts.size(); ++i) {
        EXPECT_EQ(r.puts[i], "0123456789");
        EXPECT_TRUE(in(arena, r.addrs[i])) << "put " << i << " is not the sink's memory";
    }
    // Each flush hands over a slice and gathering goes on behind it: 64-byte buffers hold six
    // 10-byte messages, so 10 messages need 2 buffers, not 10.
    EXPECT_EQ(r.allocations, 2u);
    EXPECT_EQ(r.addrs[1], r.addrs[0] + 10);
}

TEST(ZeroCopy, WriteOfSeveralBuffersKeepsOrderAndCopiesNothing) {
    arena_sink::record r;
    std::vector<char> arena(1 << 16);
    int rc = run_in_shards(1, [&]() -> future<> {
        output_stream out(std::make_unique<arena_sink>(r, arena));
        co_await out.write("gathered");
        uint64_t before = stream_copies().copies;
        std::array<temporary_buffer, 2> parts{temporary_buffer::copy_of("head"),
                                              temporary_buffer::copy_of("body")};
        const char* body = parts[1].get();
        co_await out.write(std::span<temporary_buffer>(parts));
        EXPECT_EQ(stream_copies().copies - before, 0u);
        EXPECT_EQ(r.addrs.back(), body); // the caller's buffer itself
        co_await out.close();
    });
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(r.puts, (std::vector<std::string>{"gathered", "head", "body"}));
    EXPECT_EQ(r.put_many_calls, 1u);
}

TEST(ZeroCopy, DefaultPutManyPutsInTurn) {
    // A sink without put_many (the RDMA sink today) gets the buffers one by one, in order.
    std::vector<std::string> puts;
    struct plain_sink final : data_sink_impl {
        std::vector<std::string>& puts;
        explicit plain_sink(std::vector<std::string>& p)
            : puts(p) {}
        future<> put(temporary_buffer b) override {
            puts.emplace_back(b.view());
            return yield(); // pending: the next put must wait for it
        }
        future<> close() override { return make_ready_future<>(); }
    };
    int rc = run_in_shards(1, [&]() -> future<> {
        output_stream out(std::make_unique<plain_sink>(puts));
        std::array<temporary_buffer, 3> parts{temporary_buffer::copy_of("a"), temporary_buffer::copy_of("b"),
                                              temporary_buffer::copy_of("c")};
        co_await out.write(std::span<temporary_buffer>(parts));
        co_await out.close();
    });
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(puts, (std::vector<std::string>{"a", "b", "c"}));
}

TEST(ZeroCopy, SmallTcpMessagesCostOneCopy) {
    EXPECT_EQ(run_in_shards(1, small_messages_cost_one_copy), 0);
}

TEST(ZeroCopy, TcpHeaderAndPayloadLeaveInOneSendWithoutACopy) {
    EXPECT_EQ(run_in_shards(1, header_and_payload_leave_in_one_send), 0);
}

TEST(ZeroCopy, TcpSendBuffersAreRecycledOnTheirShard) {
    int rc = run_in_shards(1, []() -> future<> {
        using namespace shoal::net::tcp::internal;
        temporary_buffer a = allocate_send_buffer(send_buffer_size);
        const char* first = a.get();
        temporary_buffer slice = a.share(100, 10);
        a.reset();
        size_t cached = cached_send_buffers();
        slice.reset(); // the last reference: back to the cache
        EXPECT_EQ(cached_send_buffers(), cached + 1);
        temporary_buffer b = allocate_send_buffer(send_buffer_size);
        EXPECT_EQ(b.get(), first); // LIFO: the warm one again
        EXPECT_EQ(cached_send_buffers(), cached);
        temporary_buffer other = allocate_send_buffer(100); // another size: heap
        EXPECT_EQ(other.size(), 100u);
        co_return;
    });
    EXPECT_EQ(rc, 0);
}
