// The ring channel (Soft-RoCE guest): messages of every size in order through a wrapping ring,
// batching, back-pressure from a consumer that does not read, oversized messages, a broken
// connection failing pending operations, and resuming on a new connection.
#include "net/rdma/services/ring_channel.hh"
#include "rdma_test_util.hh"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <span>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

extern char** environ;

using namespace shoal;
using namespace shoal::rdma_test;

namespace {

/// Patterned bytes in plain memory (the producer copies them): message `i` is `size` bytes of
/// pattern seed 1 starting at pattern position `i % 251`.
struct pattern_source {
    std::vector<char> bytes;
    explicit pattern_source(size_t n)
        : bytes(n + 256) {
        fill_pattern(bytes.data(), bytes.size(), 1);
    }
    std::span<const char> message(size_t i, size_t size) const { return {bytes.data() + i % 251, size}; }
};

/// Checks that `got` is message `i` of `size` bytes; returns a description of the mismatch.
std::string mismatch(std::span<const char> got, size_t i, size_t size) {
    if (got.size() != size) {
        return fmt::format("message {}: {} bytes, expected {}", i, got.size(), size);
    }
    size_t bad = check_pattern(got.data(), got.size(), 1, i % 251);
    if (bad != SIZE_MAX) {
        return fmt::format("message {} of {} bytes differs at byte {}", i, size, bad);
    }
    return {};
}

/// The size of message `i` of the wrap-around run: mostly small, now and then large.
size_t varied_size(size_t i) {
    if (i % 97 == 0) {
        return 8000 + (i * 7919) % 24000;
    }
    return 1 + (i * 2654435761u) % 1500;
}

/// A consumer on this shard listening for one producer connection, and that connection.
struct consumer_side {
    rdma::ring_consumer ring;
    std::optional<rdma::listener> l;
    rdma::connection conn;

    consumer_side(size_t capacity, net::socket_address a, bool poll = false)
        : ring(capacity, rdma::ring_consumer_options{.poll = poll}) {
        rdma::listen_options lo;
        lo.connection = rdma::shard_context::local().opts().connection;
        lo.connection->region = ring.descriptor();
        // The full receive window from the start (the default idle window is 2): the tests
        // count one post for a batch of 8 doorbells.
        lo.connection->idle_credits = lo.connection->credits;
        l.emplace(rdma::listen_rc(a, lo));
    }
    future<> accept() {
        conn = co_await l->accept();
        ring.attach(conn);
    }
};

/// Runs `f` and returns the message of the exception it fails with ("" when it succeeds).
template <typename T>
future<std::string> error_of(future<T> f) {
    try {
        co_await std::move(f);
    } catch (const std::exception& e) {
        co_return std::string(e.what());
    }
    co_return std::string();
}

} // namespace

TEST(ring_channel, every_size_in_order_wrapping_many_times_without_registration) {
    int rc = run_rdma(2, []() -> future<> {
        const auto a = addr(next_port());
        constexpr size_t capacity = 64 << 10;
        consumer_side cs(capacity, a);
        static std::vector<size_t> sizes;
        sizes = {1, 2, 7, 8, 9, 63, 64, 65, 1000, 4096, 32768, 65000, capacity - 16, capacity - 8};
        constexpr size_t many = 10000;
        for (size_t i = 0; i < many; ++i) {
            sizes.push_back(varied_size(i));
        }
        EXPECT_EQ(cs.ring.max_message_size(), capacity - 8);

        auto accepted = cs.accept();
        auto producer = submit_to(1, [a]() -> future<> {
            rdma::connection c = co_await rdma::connect_rc(a);
            RDMA_CHECK(c.peer_region());
            rdma::ring_producer p = co_await rdma::ring_producer::open(c, *c.peer_region());
            EXPECT_EQ(p.max_message_size(), capacity - 8);
            pattern_source src(capacity);
            auto& ctx = rdma::shard_context::local();
            const uint64_t regs = rdma::registration_count();

            // Messages sent in one task go out as one posted list.
            const uint64_t posts = ctx.stats().post_send_calls;
            std::vector<future<>> batch;
            for (size_t i = 0; i < 8; ++i) {
                batch.push_back(p.send(src.message(i, sizes[i])));
            }
            EXPECT_EQ(ctx.stats().post_send_calls, posts) << "posted before the task ended";
            co_await when_all_succeed(std::move(batch));
            EXPECT_EQ(ctx.stats().post_send_calls, posts + 1);
            EXPECT_EQ(p.stats().doorbells, 1u) << "8 records of one task took more than one doorbell";

            // The rest, up to 64 in flight at a time.
            std::vector<future<>> inflight;
            inflight.reserve(64);
            for (size_t i = 8; i < sizes.size(); ++i) {
                inflight.push_back(p.send(src.message(i, sizes[i])));
                if (inflight.size() == 64 || i + 1 == sizes.size()) {
                    co_await when_all_succeed(std::move(inflight));
                    inflight.clear();
                }
            }
            EXPECT_EQ(rdma::registration_count(), regs) << "messages went through ibv_reg_mr";
            const auto& st = p.stats();
            std::printf("  producer: %lu messages, %lu bytes, %lu wraps, %lu queued, %lu index reads, "
                        "%lu wait requests\n",
                        st.messages, st.bytes, st.wraps, st.queued, st.index_reads, st.wait_requests);
            EXPECT_EQ(st.messages, sizes.size());
            EXPECT_GT(st.wraps, 50u) << "the ring did not wrap around many times";
        });

        co_await std::move(accepted);
        std::string first_error;
        for (size_t i = 0; i < sizes.size(); ++i) {
            std::span<const char> m = co_await cs.ring.receive();
            std::string e = mismatch(m, i, sizes[i]);
            if (!e.empty() && first_error.empty()) {
                first_error = e;
            }
        }
        EXPECT_EQ(first_error, "");
        co_await std::move(producer);
        const auto& st = cs.ring.stats();
        EXPECT_EQ(st.messages, sizes.size());
        std::printf("  consumer: %lu messages, %lu doorbells, %lu wraps, %lu wait requests, %lu pushes\n",
                    st.messages, st.doorbells, st.wraps, st.wait_requests, st.pushes);
        // Sends go out 64 per task: a doorbell (receive completion) announces many records.
        EXPECT_LT(st.doorbells * 4, st.messages) << "doorbells were not batched";
        cs.ring = rdma::ring_consumer();
        cs.conn = rdma::connection();
        EXPECT_TRUE(co_await all_connections_gone());
    });
    EXPECT_EQ(rc, 0);
}

/// `open` waits for the consumer's hello only so long: a connection the consumer never attached
/// (or attached with other tags) fails it with a clear error, and once the consumer attaches it,
/// a new `open` on the same connection works.
TEST(ring_channel, open_fails_clearly_when_the_consumer_does_not_attach_in_time) {
    int rc = run_rdma(1, []() -> future<> {
        const auto a = addr(next_port());
        consumer_side cs(4096, a);
        auto accepted = cs.l->accept(); // accepted, not attached
        rdma::connection c = co_await rdma::connect_rc(a);
        rdma::connection server_side = co_await std::move(accepted);
        std::string e = co_await error_of(rdma::ring_producer::open(c, *c.peer_region(),
                                                                    rdma::ring_producer::default_max_capacity,
                                                                    {}, std::chrono::milliseconds(300)));
        std::printf("  not attached: %s\n", e.c_str());
        EXPECT_NE(e.find("no hello from the consumer within 300 ms"), std::string::npos) << e;
        cs.ring.attach(server_side);
        rdma::ring_producer p = co_await rdma::ring_producer::open(c, *c.peer_region());
        const std::string text = "after the attach";
        co_await p.send(std::span<const char>(text.data(), text.size()));
        std::span<const char> m = co_await cs.ring.receive();
        EXPECT_EQ(std::string_view(m.data(), m.size()), text);
        p = rdma::ring_producer();
        cs.ring = rdma::ring_consumer();
        server_side = rdma::connection();
        c = rdma::connection();
        EXPECT_TRUE(co_await all_connections_gone());
    });
    EXPECT_EQ(rc, 0);
}

TEST(ring_channel, a_full_ring_makes_send_wait_and_oversized_messages_fail_at_once) {
    int rc = run_rdma(1, []() -> future<> {
        const auto a = addr(next_port());
        constexpr size_t capacity = 4096;
        consumer_side cs(capacity, a);
        auto accepted = cs.accept();
        rdma::connection c = co_await rdma::connect_rc(a);
        co_await std::move(accepted);
        rdma::ring_producer p = co_await rdma::ring_producer::open(c, *c.peer_region());
        pattern_source src(capacity);

        // Four 1000-byte messages (1008-byte entries) fill the ring; the fifth needs a wrap
        // marker and the space of the first; the sixth waits behind it.
        std::vector<future<>> first_four;
        for (size_t i = 0; i < 4; ++i) {
            first_four.push_back(p.send(src.message(i, 1000)));
        }
        future<> fifth = p.send(src.message(4, 1000));
        future<> sixth = p.send(src.message(5, 10));
        EXPECT_EQ(p.queued(), 2u);
        co_await when_all_succeed(std::move(first_four));
        std::span<const char> m = co_await cs.ring.receive();
        EXPECT_EQ(mismatch(m, 0, 1000), "");
        // The producer re-read the read index, asked to be told, and waits: the consumer holds
        // message 0 and has not released anything.
        EXPECT_TRUE(co_await eventually([&] { return cs.ring.stats().wait_requests >= 1; }));
        EXPECT_GE(p.stats().index_reads, 1u);
        EXPECT_FALSE(fifth.available()) << "a send completed although the ring is full";
        EXPECT_FALSE(sixth.available());
        EXPECT_EQ(p.queued(), 2u);

        // A ring larger than this side allows is refused before anything is allocated.
        uint64_t regs = rdma::registration_count();
        std::string refused;
        try {
            co_await rdma::ring_producer::open(c, *c.peer_region(), capacity / 2);
        } catch (const std::invalid_argument& e) {
            refused = e.what();
        }
        std::printf("  too large: %s\n", refused.c_str());
        EXPECT_NE(refused.find("exceeds this side's limit of 2048 bytes"), std::string::npos) << refused;
        EXPECT_EQ(rdma::registration_count(), regs);

        // An oversized message fails at once, changes nothing, and the channel keeps working.
        future<> big = p.send(src.message(0, capacity));
        RDMA_CHECK(big.failed());
        std::string e = co_await error_of(std::move(big));
        std::printf("  oversized: %s\n", e.c_str());
        EXPECT_NE(e.find("does not fit"), std::string::npos) << e;
        EXPECT_EQ(p.queued(), 2u);

        // Reading releases the space: everything arrives intact, in order.
        for (size_t i = 1; i < 4; ++i) {
            m = co_await cs.ring.receive();
            EXPECT_EQ(mismatch(m, i, 1000), "");
        }
        m = co_await cs.ring.receive();
        EXPECT_EQ(mismatch(m, 4, 1000), "");
        m = co_await cs.ring.receive();
        EXPECT_EQ(mismatch(m, 5, 10), "");
        co_await std::move(fifth);
        co_await std::move(sixth);
        EXPECT_GE(cs.ring.stats().pushes, 1u);
        // A message as large as the ring waits until the consumer released everything.
        future<> whole = p.send(src.message(6, capacity - 8));
        m = co_await cs.ring.receive();
        EXPECT_EQ(mismatch(m, 6, capacity - 8), "");
        co_await std::move(whole);
        std::printf("  wraps %lu, index reads %lu, wait requests %lu, pushes %lu\n", p.stats().wraps,
                    p.stats().index_reads, p.stats().wait_requests, cs.ring.stats().pushes);
        p = rdma::ring_producer();
        c = rdma::connection();
        cs.ring = rdma::ring_consumer();
        cs.conn = rdma::connection();
        EXPECT_TRUE(co_await all_connections_gone());
        EXPECT_EQ(buffers_held(), 0u);
    });
    EXPECT_EQ(rc, 0);
}

TEST(ring_channel, a_broken_connection_fails_pending_operations_and_a_new_one_resumes) {
    int rc = run_rdma(1, []() -> future<> {
        const auto a = addr(next_port());
        constexpr size_t capacity = 4096;
        consumer_side cs(capacity, a);
        pattern_source src(capacity);

        // The producer goes away while the consumer waits: the receive fails.
        auto accepted = cs.accept();
        rdma::connection c = co_await rdma::connect_rc(a);
        co_await std::move(accepted);
        auto p =
            std::make_unique<rdma::ring_producer>(co_await rdma::ring_producer::open(c, *c.peer_region()));
        co_await p->send(src.message(0, 100));
        std::span<const char> m = co_await cs.ring.receive();
        EXPECT_EQ(mismatch(m, 0, 100), "");
        future<std::span<const char>> waiting = cs.ring.receive();
        EXPECT_FALSE(waiting.available());
        p.reset(); // closes the producer's connection
        c = rdma::connection();
        std::string e = co_await error_of(std::move(waiting));
        std::printf("  receive: %s\n", e.c_str());
        EXPECT_NE(e.find("closed"), std::string::npos) << e;

        // A new connection resumes at the ring's indices.
        accepted = cs.accept();
        c = co_await rdma::connect_rc(a);
        co_await std::move(accepted);
        p = std::make_unique<rdma::ring_producer>(co_await rdma::ring_producer::open(c, *c.peer_region()));
        EXPECT_EQ(p->write_index(), 112u) << "the new producer did not resume at the ring's write index";
        for (size_t i = 1; i < 4; ++i) {
            co_await p->send(src.message(i, 1000));
        }
        for (size_t i = 1; i < 4; ++i) {
            m = co_await cs.ring.receive();
            EXPECT_EQ(mismatch(m, i, 1000), "");
        }

        // A producer blocked on a full ring fails when the consumer's connection breaks, and the
        // messages announced before the break are still delivered.
        cs.ring.release();
        std::vector<future<>> sent;
        size_t next = 4;
        for (;;) {
            while (p->queued() == 0) {
                sent.push_back(p->send(src.message(next, 1000)));
                ++next;
            }
            // Queued by a stale cached read index, or truly full (then it asks the consumer).
            RDMA_CHECK(
                co_await eventually([&] { return cs.ring.stats().wait_requests >= 1 || p->queued() == 0; }));
            if (cs.ring.stats().wait_requests >= 1) {
                break;
            }
        }
        future<> blocked = std::move(sent.back());
        sent.pop_back();
        co_await when_all_succeed(std::move(sent));
        EXPECT_FALSE(blocked.available());
        cs.conn.close();
        e = co_await error_of(std::move(blocked));
        std::printf("  blocked send: %s\n", e.c_str());
        EXPECT_NE(e.find("closed"), std::string::npos) << e;
        e = co_await error_of(p->send(src.message(next, 10)));
        EXPECT_NE(e, "") << "a broken producer sent";
        for (size_t i = 4; i + 1 < next; ++i) {
            m = co_await cs.ring.receive();
            EXPECT_EQ(mismatch(m, i, 1000), "");
        }
        e = co_await error_of(cs.ring.receive());
        EXPECT_NE(e.find("closed"), std::string::npos) << e;
        p.reset();
        c = rdma::connection();
        cs.ring = rdma::ring_consumer();
        cs.conn = rdma::connection();
        EXPECT_TRUE(co_await all_connections_gone());
        EXPECT_EQ(buffers_held(), 0u);
    });
    EXPECT_EQ(rc, 0);
}

namespace {

/// The disconnect can overtake the last doorbells (their receive completions still in
/// the consumer's CQ when the break is handled), or the last commit index (`poll`). Each round,
/// the producer (shard 1) sends N records, and the moment the last one resolved drops the
/// producer and its connection; the consumer (shard 0, already waiting) must receive all N, in
/// order, then the error.
void closes_right_after_its_last_send(bool poll) {
    int rc = run_rdma(2, [poll]() -> future<> {
        constexpr unsigned rounds = 20, n = 300;
        constexpr size_t capacity = 64 << 10;
        pattern_source src(capacity);
        const pattern_source* srcp = &src;
        unsigned complete_rounds = 0;
        for (unsigned round = 0; round < rounds; ++round) {
            const auto a = addr(next_port());
            consumer_side cs(capacity, a, poll);
            auto accepted = cs.accept();
            auto produced = submit_to(1, [a, srcp]() -> future<> {
                rdma::connection c = co_await rdma::connect_rc(a);
                auto p = std::make_unique<rdma::ring_producer>(
                    co_await rdma::ring_producer::open(c, *c.peer_region()));
                std::vector<future<>> sent;
                for (unsigned i = 0; i < n; ++i) {
                    sent.push_back(p->send(srcp->message(i, 1 + (i * 37) % 200)));
                }
                co_await when_all_succeed(std::move(sent));
                p.reset(); // closes the connection at once
                c = rdma::connection();
            });
            co_await std::move(accepted);
            unsigned got = 0;
            std::string err;
            for (;;) {
                try {
                    std::span<const char> m = co_await cs.ring.receive();
                    std::string bad = mismatch(m, got, 1 + (got * 37) % 200);
                    EXPECT_EQ(bad, "") << "round " << round;
                    ++got;
                } catch (const std::exception& e) {
                    err = e.what();
                    break;
                }
            }
            co_await std::move(produced);
            EXPECT_EQ(got, n) << "round " << round << ": " << err;
            EXPECT_NE(err.find("closed"), std::string::npos) << err;
            complete_rounds += got == n;
            cs.ring = rdma::ring_consumer();
            cs.conn = rdma::connection();
        }
        std::printf("  %u of %u rounds delivered every record\n", complete_rounds, rounds);
        EXPECT_TRUE(co_await all_connections_gone());
        EXPECT_EQ(buffers_held(), 0u);
    });
    EXPECT_EQ(rc, 0);
}

} // namespace

TEST(ring_channel, a_producer_that_closes_right_after_its_last_send_loses_no_record) {
    closes_right_after_its_last_send(false);
}

TEST(ring_channel, a_producer_that_closes_right_after_its_last_send_loses_no_record_polling) {
    closes_right_after_its_last_send(true);
}

namespace {

/// Record `seq` of the sharing and wrap tests: {u32 seq, u32 size} then pattern bytes (seed 3,
/// from seq), 8 to ~1.5 KB, now and then 6 KB.
std::vector<char> make_record(uint32_t seq) {
    const uint32_t h = uint32_t((uint64_t(seq) * 2654435761u) % 1000003u);
    const uint32_t size = h % 61 == 0 ? 6000 : 8 + h % 1500;
    std::vector<char> r(size);
    std::memcpy(r.data(), &seq, 4);
    std::memcpy(r.data() + 4, &size, 4);
    fill_pattern(r.data() + 8, size - 8, 3, seq);
    return r;
}

/// Checks a received record; returns what is wrong with it ("" when it is record `seq`).
std::string check_record(std::span<const char> m, uint32_t seq) {
    if (m.size() < 8) {
        return fmt::format("record {}: only {} bytes", seq, m.size());
    }
    uint32_t got, size;
    std::memcpy(&got, m.data(), 4);
    std::memcpy(&size, m.data() + 4, 4);
    if (got != seq || size != m.size()) {
        return fmt::format("record {} of {} bytes, expected record {} ({} bytes received)", got, size, seq,
                           m.size());
    }
    size_t bad = check_pattern(m.data() + 8, m.size() - 8, 3, seq);
    return bad == SIZE_MAX ? std::string() : fmt::format("record {} differs at byte {}", seq, bad + 8);
}

/// Sends records [first, count) made by `make` through `p`, `depth` in flight (bodies kept until
/// they resolve).
future<> send_records(rdma::ring_producer& p, uint32_t count, size_t depth, uint32_t first = 0,
                      std::function<std::vector<char>(uint32_t)> make = make_record) {
    std::deque<std::vector<char>> bodies;
    std::deque<future<>> inflight;
    for (uint32_t seq = first; seq < count; ++seq) {
        bodies.push_back(make(seq));
        inflight.push_back(p.send(std::span<const char>(bodies.back().data(), bodies.back().size())));
        if (inflight.size() == depth) {
            co_await std::move(inflight.front());
            inflight.pop_front();
            bodies.pop_front();
        }
    }
    for (auto& f : inflight) {
        co_await std::move(f);
    }
}

/// Receives records [0, count) from `ring`, pausing now and then so the producer waits;
/// returns the first mismatch ("" when every record was right).
future<std::string> receive_records(rdma::ring_consumer& ring, uint32_t count) {
    std::string first;
    for (uint32_t seq = 0; seq < count; ++seq) {
        std::span<const char> m = co_await ring.receive();
        std::string bad = check_record(m, seq);
        if (!bad.empty() && first.empty()) {
            first = bad;
        }
        if (seq % 500 == 499) {
            co_await sleep(2ms);
        }
    }
    co_return first;
}

} // namespace

TEST(ring_channel, shares_its_connection_with_messages_and_another_tagged_user) {
    // The ring runs on two tags (14 and 15 by default); request/reply messages and a
    // third user's tagged immediates (tag 1) use the same connection at the same time. A small
    // ring makes the producer wait (wait requests and pushes travel beside everything else).
    int rc = run_rdma(2, []() -> future<> {
        constexpr uint32_t records = 3000, values = 2000, requests = 200;
        constexpr size_t capacity = 16 << 10;
        const auto a = addr(next_port());
        consumer_side cs(capacity, a);
        auto accepted = cs.accept();
        auto producer = submit_to(1, [a]() -> future<> {
            rdma::connection c = co_await rdma::connect_rc(a);
            RDMA_CHECK(c.peer_region());
            rdma::ring_producer p = co_await rdma::ring_producer::open(c, *c.peer_region());
            // The ring's tags are taken; a tag pair must be two tags.
            EXPECT_THROW(c.immediates(rdma::ring_tags{}.doorbell), std::logic_error);
            std::string e = co_await error_of(
                rdma::ring_producer::open(c, *c.peer_region(), capacity, rdma::ring_tags{3, 3}));
            EXPECT_NE(e.find("must differ"), std::string::npos) << e;
            rdma::immediate_channel other = c.immediates(1);
            net::message_connection m = c.messages();
            auto user = [&]() -> future<> {
                for (uint32_t v = 0; v < values; ++v) {
                    co_await other.write_with_imm({}, rdma::remote_region{}, 0, v);
                }
            };
            auto rpc = [&]() -> future<> {
                for (uint32_t i = 0; i < requests; ++i) {
                    co_await m.send(net::temporary_buffer::copy_of("request " + std::to_string(i)));
                    std::optional<net::temporary_buffer> r = co_await m.receive();
                    RDMA_CHECK(r);
                    EXPECT_EQ(r->view(), "reply " + std::to_string(i));
                }
            };
            auto u = user();
            auto r = rpc();
            co_await send_records(p, records, 64);
            co_await std::move(u);
            co_await std::move(r);
            std::printf("  producer: %lu doorbells, %lu index reads, %lu wait requests\n",
                        p.stats().doorbells, p.stats().index_reads, p.stats().wait_requests);
            EXPECT_GE(p.stats().wait_requests, 1u) << "the producer never waited: the wait tag is untested";
        });
        co_await std::move(accepted);
        rdma::connection c = cs.conn;
        rdma::immediate_channel other = c.immediates(1);
        net::message_connection m = c.messages();
        auto serve = [&]() -> future<> {
            // Exactly `requests` requests: the producer's side closes the connection when done.
            for (uint32_t i = 0; i < requests; ++i) {
                std::optional<net::temporary_buffer> q = co_await m.receive();
                RDMA_CHECK(q);
                EXPECT_EQ(q->view(), "request " + std::to_string(i));
                co_await m.send(net::temporary_buffer::copy_of("reply " + std::to_string(i)));
            }
        };
        auto read_other = [&]() -> future<> {
            for (uint32_t v = 0; v < values; ++v) {
                uint32_t got = co_await other.next();
                EXPECT_EQ(got, v) << "tag 1: out of order or misrouted";
            }
        };
        auto served = serve();
        auto read = read_other();
        std::string bad = co_await receive_records(cs.ring, records);
        EXPECT_EQ(bad, "");
        co_await std::move(read);
        co_await std::move(served);
        co_await std::move(producer);
        const auto& st = cs.ring.stats();
        EXPECT_EQ(st.messages, records);
        EXPECT_GE(st.pushes, 1u);
        std::printf("  consumer: %lu doorbells, %lu wraps, %lu wait requests, %lu pushes\n", st.doorbells,
                    st.wraps, st.wait_requests, st.pushes);
        other = rdma::immediate_channel();
        m = net::message_connection();
        c = rdma::connection();
        cs.ring = rdma::ring_consumer();
        cs.conn = rdma::connection();
        EXPECT_TRUE(co_await all_connections_gone());
    });
    EXPECT_EQ(rc, 0);
}

TEST(ring_channel, indices_decode_across_the_wrap_of_the_28_bit_doorbell_field) {
    // A doorbell carries the write index in 8-byte units mod 2^28: its field repeats every 2 GiB
    // of records, too much to write in the guest (~10 MB/s), so the ring starts just below such a
    // boundary (as if 2 GiB, or 2^35 bytes, had passed) and then carries ~2.3 MB of records in
    // large batches through a 16 KiB ring: hundreds of ring laps, wait requests and answers
    // across the field's wrap.
    int rc = run_rdma(2, []() -> future<> {
        constexpr uint32_t records = 3000;
        constexpr size_t capacity = 16 << 10;
        constexpr uint64_t span = uint64_t(1) << 31;
        for (uint64_t start : {span - 1000 * 8, 16 * span - capacity - 8}) {
            const auto a = addr(next_port());
            consumer_side cs(capacity, a);
            rdma::internal::ring_consumer_start_at(cs.ring, start);
            auto accepted = cs.accept();
            EXPECT_THROW(rdma::internal::ring_consumer_start_at(cs.ring, 0), std::logic_error);
            auto producer = submit_to(1, [a, start]() -> future<> {
                rdma::connection c = co_await rdma::connect_rc(a);
                rdma::ring_producer p = co_await rdma::ring_producer::open(c, *c.peer_region());
                EXPECT_EQ(p.write_index(), start) << "the producer did not resume at the ring's index";
                co_await send_records(p, records, 256);
                EXPECT_GT(p.write_index(), (start / span + 1) * span) << "the field did not wrap";
                EXPECT_GE(p.stats().wait_requests, 1u);
                std::printf("  start %lu: end %lu, %lu doorbells, %lu wraps, %lu wait requests\n", start,
                            p.write_index(), p.stats().doorbells, p.stats().wraps, p.stats().wait_requests);
            });
            co_await std::move(accepted);
            std::string bad = co_await receive_records(cs.ring, records);
            EXPECT_EQ(bad, "") << "start " << start;
            co_await std::move(producer);
            EXPECT_EQ(cs.ring.stats().messages, records);
            EXPECT_GE(cs.ring.stats().pushes, 1u);
            // The producer's side closed the connection when done; nothing was a protocol error.
            std::string err;
            if (cs.ring.error()) {
                err = co_await error_of(make_exception_future<>(cs.ring.error()));
            }
            EXPECT_EQ(err.find("protocol error"), std::string::npos) << err;
            cs.ring = rdma::ring_consumer();
            cs.conn = rdma::connection();
        }
        EXPECT_TRUE(co_await all_connections_gone());
    });
    EXPECT_EQ(rc, 0);
}

TEST(ring_channel, a_capacity_above_the_doorbells_range_is_refused) {
    // 1 GiB is the largest ring a 28-bit doorbell decodes (ring_channel.cc); 2 GiB is refused by
    // the consumer and by a producer shown such a region, before anything is allocated.
    int rc = run_rdma(1, []() -> future<> {
        EXPECT_EQ(rdma::ring_layout::max_capacity, size_t(1) << 30);
        std::string e;
        try {
            rdma::ring_consumer too_big(size_t(2) << 30);
        } catch (const std::invalid_argument& ex) {
            e = ex.what();
        }
        EXPECT_NE(e.find("from 64 to 1073741824"), std::string::npos) << e;

        const auto a = addr(next_port());
        consumer_side cs(4096, a);
        auto accepted = cs.accept();
        rdma::connection c = co_await rdma::connect_rc(a);
        co_await std::move(accepted);
        const uint64_t regs = rdma::registration_count();
        rdma::remote_region huge = *c.peer_region();
        huge.length = rdma::ring_layout::header_size + (size_t(2) << 30);
        e = co_await error_of(rdma::ring_producer::open(c, huge, SIZE_MAX));
        std::printf("  2 GiB: %s\n", e.c_str());
        EXPECT_NE(e.find("from 64 to 1073741824"), std::string::npos) << e;
        EXPECT_EQ(rdma::registration_count(), regs);
        // The refused opens left the tags free: a producer opens on the same connection.
        rdma::ring_producer p = co_await rdma::ring_producer::open(c, *c.peer_region());
        co_await p.send(std::span<const char>("ok", 2));
        std::span<const char> m = co_await cs.ring.receive();
        EXPECT_EQ(std::string(m.data(), m.size()), "ok");
        p = rdma::ring_producer();
        c = rdma::connection();
        cs.ring = rdma::ring_consumer();
        cs.conn = rdma::connection();
        EXPECT_TRUE(co_await all_connections_gone());
    });
    EXPECT_EQ(rc, 0);
}

namespace {

/// The environment variable that makes `ring_resync_child.produce` a producer: "PORT TOTAL".
constexpr const char* resync_child_env = "SHOAL_RING_RESYNC_CHILD";

/// Starts this test binary again as a producer process for the consumer on `port`; its output
/// goes to /dev/null.
pid_t spawn_producer(uint16_t port, uint32_t total) {
    std::string filter = "--gtest_filter=ring_resync_child.produce";
    std::string self = "/proc/self/exe";
    char* argv[] = {self.data(), filter.data(), nullptr};
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
        env_strings.emplace_back(*e);
    }
    env_strings.push_back(fmt::format("{}={} {}", resync_child_env, port, total));
    std::vector<char*> envp;
    for (auto& e : env_strings) {
        envp.push_back(e.data());
    }
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    int err = posix_spawn(&pid, self.c_str(), &fa, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (err != 0) {
        throw std::runtime_error(fmt::format("posix_spawn: {}", std::strerror(err)));
    }
    return pid;
}

} // namespace

// Not a test of its own: the producer process `a_restarted_producer_process_resends_...` starts
// and kills. It connects, resumes at the ring's record count and sends up to TOTAL.
TEST(ring_resync_child, produce) {
    const char* spec = std::getenv(resync_child_env);
    if (!spec) {
        GTEST_SKIP() << "a producer process of ring_channel.a_restarted_producer_process_*";
    }
    unsigned port = 0, total = 0;
    ASSERT_EQ(std::sscanf(spec, "%u %u", &port, &total), 2);
    int rc = run_rdma(1, [port, total]() -> future<> {
        rdma::connection c = co_await rdma::connect_rc(addr(uint16_t(port)));
        rdma::ring_producer p = co_await rdma::ring_producer::open(c, *c.peer_region());
        co_await send_records(p, total, 64, uint32_t(p.resume_record()));
    });
    EXPECT_EQ(rc, 0);
}

namespace {

/// Resynchronisation: producer processes are killed (SIGKILL) at random points while
/// they send (after a random number of delivered records); each new one opens on a new
/// connection, learns from the ring's header how many records the consumer was announced
/// (`resume_record`) and sends from there. The consumer (polling the commit index with `poll`)
/// must see every sequence number exactly once, in order, with intact contents.
void restarted_producers_resend(bool poll) {
    int rc = run_rdma(1, [poll]() -> future<> {
        constexpr uint32_t total = 20000;
        // A sanitized producer process takes seconds to start in the emulated guest: fewer
        // restarts keep this test near a minute there; the release build runs all twelve.
        constexpr unsigned max_kills = sanitized_build ? 5 : 12;
        const auto a = addr(next_port());
        consumer_side cs(16 << 10, a, poll);
        const unsigned seed = std::random_device{}();
        std::mt19937 rng(seed);
        uint32_t expected = 0;
        unsigned children = 0, kills = 0, resumed_mid = 0;
        std::string first_bad;
        while (expected < total && children < max_kills + 5) {
            const pid_t pid = spawn_producer(a.port(), total);
            ++children;
            co_await cs.accept();
            const uint32_t at_attach = expected;
            // Where this producer dies, counted in records it delivered: the third dies before
            // it sends anything, the others after 1 to 1000 records (max_kills × 1000 < total, so every
            // kill lands before the end). Counting records rather than milliseconds keeps the
            // kills mid-sequence however slowly a process starts (sanitizers, an emulated guest).
            const uint32_t kill_after = children == 3 ? 0 : 1 + rng() % 1000;
            auto killer = [&]() -> future<> {
                if (kills >= max_kills) {
                    co_return; // this one runs to the end
                }
                const bool reached = co_await eventually(
                    [&] { return expected >= at_attach + kill_after || bool(cs.ring.error()); });
                EXPECT_TRUE(reached) << "producer " << children << " delivered " << expected - at_attach
                                     << " records in " << patience.count() << " ms";
                ::kill(pid, SIGKILL);
                // The kernel tears the dead process's connection down; should it not, this side
                // closes it (as a heartbeat would), which still delivers every doorbell.
                if (!co_await eventually([&] { return bool(cs.ring.error()); })) {
                    ADD_FAILURE() << "no disconnect seen " << patience.count()
                                  << " ms after killing producer " << children;
                    cs.conn.close();
                }
            };
            auto k = killer();
            for (;;) {
                try {
                    std::span<const char> m = co_await cs.ring.receive();
                    std::string bad = check_record(m, expected);
                    if (!bad.empty() && first_bad.empty()) {
                        first_bad = fmt::format("producer {}: {}", children, bad);
                    }
                    ++expected;
                } catch (const std::exception&) {
                    break; // the producer died or finished
                }
            }
            co_await std::move(k);
            int status = 0;
            ::waitpid(pid, &status, 0);
            if (WIFSIGNALED(status)) {
                ++kills;
            } else {
                EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "producer " << children;
            }
            resumed_mid += at_attach != 0 && at_attach < total;
        }
        std::printf("  seed %u: %u producer processes, %u killed, %u resumed mid-sequence, %u records\n",
                    seed, children, kills, resumed_mid, expected);
        EXPECT_EQ(first_bad, "") << "seed " << seed;
        EXPECT_EQ(expected, total) << "seed " << seed;
        EXPECT_EQ(kills, max_kills) << "seed " << seed;
        EXPECT_GE(resumed_mid, 1u) << "seed " << seed;
        cs.ring = rdma::ring_consumer();
        cs.conn = rdma::connection();
        EXPECT_TRUE(co_await all_connections_gone());
    });
    EXPECT_EQ(rc, 0);
}

} // namespace

TEST(ring_channel, a_restarted_producer_process_resends_from_the_records_announced) {
    restarted_producers_resend(false);
}

TEST(ring_channel, a_restarted_producer_process_resends_from_the_records_announced_polling) {
    restarted_producers_resend(true);
}

namespace {

/// Record `seq` of the polling test: {u32 seq, u32 size} then pattern bytes (seed 5, from seq),
/// 8 to 256 bytes, the size drawn from `seed` and `seq`.
std::vector<char> small_record(uint32_t seed, uint32_t seq) {
    const uint32_t size = 8 + uint32_t((uint64_t(seq ^ seed) * 2654435761u) % 1000003u) % 249;
    std::vector<char> r(size);
    std::memcpy(r.data(), &seq, 4);
    std::memcpy(r.data() + 4, &size, 4);
    fill_pattern(r.data() + 8, size - 8, 5, seq);
    return r;
}

/// Checks a received small record; returns what is wrong with it ("" when it is record `seq`).
std::string check_small_record(std::span<const char> m, uint32_t seed, uint32_t seq) {
    const std::vector<char> want = small_record(seed, seq);
    if (m.size() != want.size() || std::memcmp(m.data(), want.data(), want.size()) != 0) {
        uint32_t got = 0;
        std::memcpy(&got, m.data(), std::min<size_t>(4, m.size()));
        return fmt::format("record {} ({} bytes) arrived as record {} of {} bytes", seq, want.size(), got,
                           m.size());
    }
    return {};
}

/// The producer of a test's polling ring and its connection: on shard 1.
std::optional<rdma::ring_producer> shard1_producer;
rdma::connection shard1_connection;

/// Connects shard 1 to `cs`'s listener at `a` and opens `shard1_producer` on that connection.
future<> open_shard1_producer(consumer_side& cs, net::socket_address a) {
    auto accepted = cs.accept();
    co_await submit_to(1, [a]() -> future<> {
        shard1_connection = co_await rdma::connect_rc(a);
        shard1_producer.emplace(
            co_await rdma::ring_producer::open(shard1_connection, *shard1_connection.peer_region()));
    });
    co_await std::move(accepted);
}

/// Closes both ends of `open_shard1_producer`'s channel; expects every connection gone.
future<> close_shard1_producer(consumer_side& cs) {
    co_await submit_to(1, [] {
        shard1_producer.reset();
        shard1_connection = rdma::connection();
    });
    cs.ring = rdma::ring_consumer();
    cs.conn = rdma::connection();
    EXPECT_TRUE(co_await all_connections_gone());
}

/// Sends small records [first, first + count) through `p`, `depth` in flight.
future<> send_small_records(rdma::ring_producer& p, uint32_t seed, uint32_t first, uint32_t count,
                            size_t depth) {
    return send_records(p, first + count, depth, first,
                        [seed](uint32_t seq) { return small_record(seed, seq); });
}

} // namespace

TEST(ring_channel, a_polling_consumer_takes_no_doorbell_while_it_polls_and_is_woken_after_it_slept) {
    // A consumer that polls the commit index takes no receive completion while it
    // polls (only one per sleep, which it asked for), and one whose shard went to sleep is still
    // woken by the next record. The shards poll 2 ms before they sleep (default 200 us): the
    // emulated guest's producer often stalls longer than 200 us, and each stall would be a sleep.
    reactor_config cfg;
    cfg.idle_poll = std::chrono::milliseconds(2);
    int rc = run_rdma(
        2,
        []() -> future<> {
            constexpr uint32_t total = sanitized_build ? 80000 : 200000; // ASan: 20 s rather than 50 s
            constexpr size_t capacity = 64 << 10;                        // ~500 records a lap: ~400 laps
            const uint32_t seed = std::random_device{}();
            const auto a = addr(next_port());
            consumer_side cs(capacity, a, true);
            static std::optional<rdma::ring_producer>& prod = shard1_producer;
            co_await open_shard1_producer(cs, a);

            // Streaming: the consumer always has a receive pending.
            const reactor_stats before = local_reactor().stats();
            const uint64_t asked_before = cs.ring.stats().wake_requests;
            auto sent = submit_to(1, [seed] { return send_small_records(*prod, seed, 0, total, 64); });
            std::string first_bad;
            for (uint32_t seq = 0; seq < total; ++seq) {
                std::span<const char> m = co_await cs.ring.receive();
                std::string bad = check_small_record(m, seed, seq);
                if (!bad.empty() && first_bad.empty()) {
                    first_bad = bad;
                }
            }
            co_await std::move(sent);
            EXPECT_EQ(first_bad, "") << "seed " << seed;
            const rdma::ring_consumer_stats st = cs.ring.stats();
            const rdma::ring_producer_stats pst = co_await submit_to(1, [] { return prod->stats(); });
            std::printf("  seed %u: consumer %lu messages, %lu wraps, %lu polled batches, %lu doorbells, %lu "
                        "wake requests, %lu pushes; producer %lu commits, %lu doorbells\n",
                        seed, st.messages, st.wraps, st.polled, st.doorbells, st.wake_requests, st.pushes,
                        pst.commits, pst.doorbells);
            const reactor_stats after = local_reactor().stats();
            const uint64_t sleep_attempts =
                (after.sleeps - before.sleeps) + (after.aborted_sleeps - before.aborted_sleeps);
            std::printf("  %.4f receive completions per record, %lu sleep attempts of the consumer's shard\n",
                        double(st.doorbells) / double(st.messages), sleep_attempts);
            EXPECT_EQ(st.messages, total);
            EXPECT_GT(st.wraps, 100u);
            EXPECT_GT(st.polled, 0u);
            // How many doorbells there are depends on how often the emulated producer stalls
            // longer than the idle poll (a sanitizer build on a loaded host: ~5x more than a
            // release build): the rate belongs to the benchmark. What the design promises is
            // exact: a doorbell only answers a wake request, and the consumer asks for one only
            // on its way to sleep (each request aborts that attempt, so it is counted there).
            EXPECT_LE(pst.doorbells, pst.wake_requests) << "a doorbell nobody asked for";
            EXPECT_LE(st.doorbells, st.wake_requests) << "a receive completion nobody asked for";
            EXPECT_LE(st.wake_requests - asked_before, sleep_attempts)
                << "a wake request while the shard polled";

            // Sleeping: a receive waits while the shard sleeps; each round's records, sent after
            // the sleep, must arrive (they bring a doorbell the consumer asked for).
            uint32_t next = total;
            std::mt19937 rng(seed);
            bool lost = false;
            for (unsigned round = 0; round < 20 && !lost; ++round) {
                future<std::span<const char>> waiting = cs.ring.receive();
                EXPECT_FALSE(waiting.available());
                const uint64_t sleeps = local_reactor().stats().sleeps;
                co_await sleep(std::chrono::milliseconds(20 + rng() % 20));
                // Until the shard slept: under load the timer can expire while the vCPU is
                // descheduled, before the shard idled long enough to sleep (a test flake).
                for (auto until = std::chrono::steady_clock::now() + patience;
                     local_reactor().stats().sleeps == sleeps && std::chrono::steady_clock::now() < until;) {
                    co_await sleep(20ms);
                }
                EXPECT_GT(local_reactor().stats().sleeps, sleeps)
                    << "round " << round << ": the shard never slept";
                const uint32_t n = 1 + rng() % 3;
                co_await submit_to(1,
                                   [seed, next, n] { return send_small_records(*prod, seed, next, n, 64); });
                for (uint32_t k = 0; k < n; ++k) {
                    auto f = k == 0 ? std::move(waiting) : cs.ring.receive();
                    std::span<const char> m;
                    try {
                        m = co_await with_timeout(steady_clock_type::now() + patience, std::move(f));
                    } catch (const timed_out_error&) {
                        ADD_FAILURE() << "round " << round << ": record " << next << " never delivered";
                        lost = true;
                        break;
                    }
                    EXPECT_EQ(check_small_record(m, seed, next), "") << "seed " << seed;
                    ++next;
                }
            }
            const rdma::ring_consumer_stats st2 = cs.ring.stats();
            std::printf("  after 20 sleeps: %lu doorbells, %lu wake requests, %lu polled batches\n",
                        st2.doorbells, st2.wake_requests, st2.polled);
            EXPECT_GT(st2.wake_requests, st.wake_requests);
            co_await close_shard1_producer(cs);
        },
        test_options(), cfg);
    EXPECT_EQ(rc, 0);
}

namespace {

/// What the producer of the write test saw.
struct write_run {
    uint32_t refused = 0; ///< try_write found no room
    uint32_t waited = 0;  ///< write returned a future that was not ready
    uint64_t wraps = 0;
    uint64_t flushes = 0;
};

} // namespace

TEST(ring_channel, write_and_try_write_take_random_records_through_a_small_ring_and_flush_loses_none) {
    // Records without a future each. 4,000 checksummed records of 8 B - 6 KB through
    // an 8 KiB ring (hundreds of laps) from shard 1; the consumer pauses, so try_write finds
    // the ring full and write waits. The producer closes its connection the moment its last
    // flush resolved: every record must still arrive (flush's no-loss guarantee).
    int rc = run_rdma(2, []() -> future<> {
        constexpr uint32_t n = 4000;
        constexpr size_t capacity = 8192;
        const auto a = addr(next_port());
        consumer_side cs(capacity, a);
        auto accepted = cs.accept();
        auto produced = submit_to(1, [a]() -> future<write_run> {
            rdma::connection c = co_await rdma::connect_rc(a);
            auto p = std::make_unique<rdma::ring_producer>(
                co_await rdma::ring_producer::open(c, *c.peer_region()));
            write_run run;
            for (uint32_t seq = 0; seq < n; ++seq) {
                std::vector<char> body = make_record(seq); // freed once taken: write copies
                std::span<const char> m(body.data(), body.size());
                if (seq % 2 == 0) {
                    if (!p->try_write(m)) {
                        ++run.refused;
                        co_await p->write(m);
                    }
                } else {
                    future<> w = p->write(m);
                    run.waited += !w.available();
                    co_await std::move(w);
                }
                if (seq % 700 == 699) {
                    co_await p->flush();
                    ++run.flushes;
                }
            }
            co_await p->flush();
            run.wraps = p->stats().wraps;
            p.reset(); // closes the connection at once
            c = rdma::connection();
            co_return run;
        });
        co_await std::move(accepted);
        std::string first_bad, err;
        uint32_t got = 0;
        for (;;) {
            try {
                std::span<const char> m = co_await cs.ring.receive();
                std::string bad = check_record(m, got);
                if (!bad.empty() && first_bad.empty()) {
                    first_bad = bad;
                }
                ++got;
                if (got % 64 == 0) {
                    co_await sleep(1ms);
                }
            } catch (const std::exception& e) {
                err = e.what();
                break;
            }
        }
        write_run run = co_await std::move(produced);
        std::printf("  %u records, try_write refused %u, writes waited %u, wraps %lu, doorbells %lu\n", got,
                    run.refused, run.waited, run.wraps, cs.ring.stats().doorbells);
        EXPECT_EQ(first_bad, "");
        EXPECT_EQ(got, n) << err;
        EXPECT_NE(err.find("closed"), std::string::npos) << err;
        EXPECT_GT(run.refused, 0u) << "try_write never found the ring full";
        EXPECT_GT(run.waited, 0u) << "write never waited for room";
        EXPECT_GT(run.wraps, 100u);
        EXPECT_LT(cs.ring.stats().doorbells, n) << "no batching";
        cs.ring = rdma::ring_consumer();
        cs.conn = rdma::connection();
        EXPECT_TRUE(co_await all_connections_gone());
        EXPECT_EQ(buffers_held(), 0u);
    });
    EXPECT_EQ(rc, 0);
}

TEST(ring_channel, a_broken_connection_fails_a_pending_flush_and_later_writes) {
    int rc = run_rdma(1, []() -> future<> {
        const auto a = addr(next_port());
        constexpr size_t capacity = 4096;
        consumer_side cs(capacity, a);
        auto accepted = cs.accept();
        rdma::connection c = co_await rdma::connect_rc(a);
        co_await std::move(accepted);
        rdma::ring_producer p = co_await rdma::ring_producer::open(c, *c.peer_region());
        pattern_source src(capacity);

        // Nothing written: flush is ready. Then three records and a flush that delivers them.
        RDMA_CHECK(p.flush().available());
        for (size_t i = 0; i < 3; ++i) {
            RDMA_CHECK(p.try_write(src.message(i, 500)));
        }
        co_await p.flush();
        RDMA_CHECK(p.flush().available());
        for (size_t i = 0; i < 3; ++i) {
            std::span<const char> m = co_await cs.ring.receive();
            EXPECT_EQ(mismatch(m, i, 500), "");
        }
        // Too large: invalid_argument at once, from both forms, nothing changes.
        EXPECT_THROW(p.try_write(src.message(0, capacity)), std::invalid_argument);
        future<> big = p.write(src.message(0, capacity));
        RDMA_CHECK(big.failed());
        std::string e = co_await error_of(std::move(big));
        EXPECT_NE(e.find("does not fit"), std::string::npos) << e;

        // Fill the ring (the consumer releases nothing more): try_write refuses, write and the
        // flush behind it wait.
        // (A refused try_write may only mean a stale cached read index: then write is taken
        // after the producer READ the read index, and the loop goes on.)
        size_t next = 3;
        std::optional<future<>> waiting;
        for (;;) {
            while (p.try_write(src.message(next, 500))) {
                ++next;
            }
            waiting.emplace(p.write(src.message(next, 500)));
            RDMA_CHECK(co_await eventually(
                [&] { return cs.ring.stats().wait_requests >= 1 || waiting->available(); }));
            if (cs.ring.stats().wait_requests >= 1) {
                break;
            }
            co_await std::move(*waiting);
            ++next;
        }
        future<> flushed = p.flush();
        EXPECT_FALSE(p.try_write(src.message(next + 1, 8))) << "try_write overtook a waiting write";
        EXPECT_FALSE(waiting->available()) << "a write was taken although the ring is full";
        EXPECT_FALSE(flushed.available());

        // The connection breaks: the waiting write and the flush fail with its error, and so
        // does everything after.
        cs.conn.close();
        e = co_await error_of(std::move(flushed));
        std::printf("  pending flush: %s\n", e.c_str());
        EXPECT_NE(e.find("closed"), std::string::npos) << e;
        e = co_await error_of(std::move(*waiting));
        EXPECT_NE(e.find("closed"), std::string::npos) << e;
        e = co_await error_of(p.flush());
        EXPECT_NE(e.find("closed"), std::string::npos) << e;
        e = co_await error_of(p.write(src.message(0, 8)));
        EXPECT_NE(e.find("closed"), std::string::npos) << e;
        try {
            (void)p.try_write(src.message(0, 8));
            ADD_FAILURE() << "try_write on a broken producer did not throw";
        } catch (const std::exception& ex) {
            EXPECT_NE(std::string(ex.what()).find("closed"), std::string::npos) << ex.what();
        }
        // The records announced before the break still arrive.
        for (size_t i = 3; i < next; ++i) {
            std::span<const char> m = co_await cs.ring.receive();
            EXPECT_EQ(mismatch(m, i, 500), "");
        }
        e = co_await error_of(cs.ring.receive());
        EXPECT_NE(e.find("closed"), std::string::npos) << e;
        p = rdma::ring_producer();
        c = rdma::connection();
        cs.ring = rdma::ring_consumer();
        cs.conn = rdma::connection();
        EXPECT_TRUE(co_await all_connections_gone());
        EXPECT_EQ(buffers_held(), 0u);
    });
    EXPECT_EQ(rc, 0);
}

TEST(ring_channel, send_write_and_try_write_mixed_keep_their_order) {
    // 3,000 records through an 8 KiB ring, each taken by send, write or try_write (send when
    // it refuses) in turn without waiting in between; the consumer checks the order.
    int rc = run_rdma(1, []() -> future<> {
        constexpr uint32_t n = 3000;
        const auto a = addr(next_port());
        consumer_side cs(8192, a);
        auto accepted = cs.accept();
        rdma::connection c = co_await rdma::connect_rc(a);
        co_await std::move(accepted);
        rdma::ring_producer p = co_await rdma::ring_producer::open(c, *c.peer_region());
        auto received = receive_records(cs.ring, n);
        std::deque<std::vector<char>> bodies; // kept until the whole run resolved
        std::vector<future<>> pending;
        uint32_t refused = 0;
        for (uint32_t seq = 0; seq < n; ++seq) {
            bodies.push_back(make_record(seq));
            std::span<const char> m(bodies.back().data(), bodies.back().size());
            switch (seq % 3) {
            case 0:
                pending.push_back(p.send(m));
                break;
            case 1:
                pending.push_back(p.write(m));
                break;
            default:
                if (!p.try_write(m)) {
                    ++refused;
                    pending.push_back(p.send(m));
                }
            }
            if (seq % 40 == 39) {
                // Let the queue drain now and then, so records are both staged at once and
                // queued behind waiting ones.
                while (p.queued() > 0) {
                    co_await yield();
                }
            }
        }
        future<> flushed = p.flush();
        co_await when_all_succeed(std::move(pending));
        co_await std::move(flushed);
        EXPECT_EQ(co_await std::move(received), "");
        std::printf("  try_write refused %u, sends queued %lu, wraps %lu\n", refused, p.stats().queued,
                    p.stats().wraps);
        EXPECT_GT(p.stats().queued, 0u) << "nothing ever waited: the test did not mix queued and staged";
        EXPECT_LT(refused, n / 3) << "try_write never took a record";
        p = rdma::ring_producer();
        c = rdma::connection();
        cs.ring = rdma::ring_consumer();
        cs.conn = rdma::connection();
        EXPECT_TRUE(co_await all_connections_gone());
        EXPECT_EQ(buffers_held(), 0u);
    });
    EXPECT_EQ(rc, 0);
}

TEST(ring_channel, a_polling_consumer_takes_a_torn_commit_word_for_no_index) {
    // rxe places the 8-byte commit WRITE byte by byte, so a consumer that
    // polls can read a word half old commit index, half new (the flake: an index inside an
    // entry, "bad entry"). Every such mixture, written here by a real RDMA WRITE before the
    // batch it would announce, must be taken for no index; the batch then arrives intact.
    int rc = run_rdma(2, []() -> future<> {
        const auto a = addr(next_port());
        consumer_side cs(4096, a, true);
        static std::optional<rdma::ring_producer>& prod = shard1_producer;
        static rdma::connection& pconn = shard1_connection;
        co_await open_shard1_producer(cs, a);
        static std::string first, second;
        first.assign(40, 'a');    // an entry of 48 bytes: commit index 48
        second.assign(2032, 'b'); // then one of 2040: 2088, 261 units (two bytes change)
        co_await submit_to(1, [] { return prod->send({first.data(), first.size()}); });
        std::span<const char> m = co_await cs.ring.receive();
        EXPECT_EQ(std::string(m.data(), m.size()), first);

        // The wire format of the commit word (ring_layout::commit_index_offset).
        auto seal = [](uint64_t index) {
            const uint32_t units = uint32_t(index >> 3);
            return uint64_t(units) | (uint64_t(~units) << 32);
        };
        const uint64_t old_word = seal(48), new_word = seal(48 + 2040);
        future<std::span<const char>> waiting = cs.ring.receive();
        const unsigned torn = co_await submit_to(1, [old_word, new_word]() -> future<unsigned> {
            static uint64_t words[14];
            rdma::memory_region mr = rdma::register_memory(words, sizeof(words));
            unsigned n = 0;
            for (unsigned k = 1; k < 8; ++k) {
                // The first k bytes of the new word over the old one, and the last k.
                std::memcpy(&words[n], &old_word, 8);
                std::memcpy(&words[n], &new_word, k);
                ++n;
                std::memcpy(&words[n], &old_word, 8);
                std::memcpy(reinterpret_cast<char*>(&words[n]) + 8 - k,
                            reinterpret_cast<const char*>(&new_word) + 8 - k, k);
                ++n;
            }
            unsigned written = 0;
            for (unsigned i = 0; i < n; ++i) {
                if (words[i] == old_word || words[i] == new_word ||
                    std::find(words, words + i, words[i]) != words + i) {
                    continue; // not torn, or written already
                }
                co_await pconn.write(mr.span(i * 8, 8), *pconn.peer_region(),
                                     rdma::ring_layout::commit_index_offset);
                ++written;
                co_await sleep(2ms); // the consumer polls it meanwhile
            }
            co_return written;
        });
        EXPECT_GE(torn, 5u) << "distinct torn words written";
        EXPECT_FALSE(waiting.available()) << "a torn commit word announced something";
        EXPECT_FALSE(cs.ring.error()) << "a torn commit word broke the ring";

        // The producer's own commit (the last torn word is still there) announces the batch.
        co_await submit_to(1, [] { return prod->send({second.data(), second.size()}); });
        m = co_await with_timeout(steady_clock_type::now() + patience, std::move(waiting));
        EXPECT_EQ(std::string(m.data(), m.size()), second);
        EXPECT_FALSE(cs.ring.error());
        co_await close_shard1_producer(cs);
    });
    EXPECT_EQ(rc, 0);
}
