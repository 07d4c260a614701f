// Many producers into one consumer (Soft-RoCE guest): fair round-robin draining (a flooding
// producer does not starve a slow one), 4 producers × checksummed sequences of random sizes
// through small rings with many wraps and a slow consumer, and a producer that dies without
// wedging the others.
#include "net/rdma/services/ring_channel.hh"
#include "net/rdma/services/ring_fan_in.hh"
#include "rdma_test_util.hh"

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <span>

using namespace shoal;
using namespace shoal::rdma_test;

namespace {

/// Record `seq` of producer `p`: {u32 p, u32 seq} then patterned bytes (seed p + 1, from seq).
std::vector<char> make_record(unsigned p, uint32_t seq, size_t size) {
    std::vector<char> r(std::max<size_t>(size, 8));
    std::memcpy(r.data(), &p, 4);
    std::memcpy(r.data() + 4, &seq, 4);
    fill_pattern(r.data() + 8, r.size() - 8, p + 1, seq);
    return r;
}

/// The size of record `seq` of producer `p`: 8 to ~1.5 KB, now and then 3 KB (deterministic).
size_t record_size(unsigned p, uint32_t seq) {
    uint64_t h = (uint64_t(seq) * 2654435761u + p * 40503u) % 1000003u;
    return h % 53 == 0 ? 3000 : 8 + h % 1500;
}

/// Checks a received record; returns a description of what is wrong ("" when it is right).
std::string check_record(const rdma::fan_in_message& m, uint32_t expected_seq, size_t expected_size) {
    if (m.data.size() != std::max<size_t>(expected_size, 8)) {
        return fmt::format("producer {} record {}: {} bytes, expected {}", m.producer, expected_seq,
                           m.data.size(), expected_size);
    }
    unsigned p;
    uint32_t seq;
    std::memcpy(&p, m.data.data(), 4);
    std::memcpy(&seq, m.data.data() + 4, 4);
    if (p != m.producer || seq != expected_seq) {
        return fmt::format("from ring {}: producer {} record {}, expected record {}", m.producer, p, seq,
                           expected_seq);
    }
    size_t bad = check_pattern(m.data.data() + 8, m.data.size() - 8, p + 1, seq);
    if (bad != SIZE_MAX) {
        return fmt::format("producer {} record {} differs at byte {}", p, seq, bad + 8);
    }
    return {};
}

/// A fan-in of `n` rings on this shard, one listener (port) per producer offering its ring.
struct fan_in_side {
    rdma::ring_fan_in fan;
    std::vector<rdma::listener> ls;
    std::vector<net::socket_address> addrs;

    fan_in_side(unsigned n, size_t capacity, bool poll = false)
        : fan(n, capacity, rdma::ring_consumer_options{.poll = poll}) {
        for (unsigned i = 0; i < n; ++i) {
            addrs.push_back(addr(next_port()));
            rdma::listen_options lo;
            lo.connection = rdma::shard_context::local().opts().connection;
            lo.connection->region = fan.descriptor(i);
            ls.push_back(rdma::listen_rc(addrs.back(), lo));
        }
    }
    /// Accepts producer i's connection and attaches it to ring i on `tags[i]` (the default tags
    /// when `tags` is empty), for every i; keeps the connections in `conns`.
    future<> accept_all(std::vector<rdma::ring_tags> tags = {}) {
        for (unsigned i = 0; i < fan.producers(); ++i) {
            rdma::connection c = co_await ls[i].accept();
            conns.push_back(c);
            fan.attach(i, std::move(c), tags.empty() ? rdma::ring_tags{} : tags[i]);
        }
    }
    std::vector<rdma::connection> conns;
};

/// Receives `total` records from `side.fan`, counting each producer's in `next` (one slot per
/// producer) and checking each against its sequence, with a 2 ms pause every 1,000 (a slow
/// consumer: the producers wait); returns the first mismatch ("" when all were right).
future<std::string> receive_checked(fan_in_side& side, std::vector<uint32_t>& next, uint32_t total) {
    std::string first_error;
    for (uint32_t k = 0; k < total; ++k) {
        rdma::fan_in_message m =
            co_await with_timeout(steady_clock_type::now() + patience, side.fan.receive());
        RDMA_CHECK(m.producer < next.size());
        uint32_t seq = next[m.producer]++;
        std::string e = check_record(m, seq, record_size(m.producer, seq));
        if (!e.empty() && first_error.empty()) {
            first_error = e;
        }
        if (k % 1000 == 999) {
            co_await sleep(2ms);
        }
    }
    co_return first_error;
}

/// Sends records [0, count) of producer `p` to `a` (depth 32 in flight) and closes as soon as
/// the last send resolved (the consumer still gets every record: docs/rdma.md, "A disconnect
/// does not overtake the last doorbells"); resolves with the producer's doorbell count.
future<uint64_t> produce(net::socket_address a, unsigned p, uint32_t count, rdma::ring_tags tags = {},
                         bool other_user = false) {
    rdma::connection c = co_await rdma::connect_rc(a);
    rdma::ring_producer prod = co_await rdma::ring_producer::open(
        c, *c.peer_region(), rdma::ring_producer::default_max_capacity, tags);
    // With `other_user`, tag 0 carries another user's values (one per 10 records) beside the
    // ring on the same connection.
    rdma::immediate_channel other;
    if (other_user) {
        other = c.immediates(0);
    }
    std::deque<future<>> values;
    std::deque<std::vector<char>> bodies;
    std::deque<future<>> inflight;
    for (uint32_t seq = 0; seq < count; ++seq) {
        bodies.push_back(make_record(p, seq, record_size(p, seq)));
        inflight.push_back(prod.send(std::span<const char>(bodies.back().data(), bodies.back().size())));
        if (other_user && seq % 10 == 0) {
            values.push_back(other.write_with_imm({}, rdma::remote_region{}, 0, seq / 10));
        }
        if (inflight.size() == 32) {
            co_await std::move(inflight.front());
            inflight.pop_front();
            bodies.pop_front();
        }
    }
    for (auto& f : inflight) {
        co_await std::move(f);
    }
    for (auto& f : values) {
        co_await std::move(f);
    }
    co_return prod.stats().doorbells;
}

} // namespace

TEST(ring_fan_in, a_flooding_producer_does_not_starve_a_slow_one) {
    int rc = run_rdma(2, []() -> future<> {
        fan_in_side side(2, 128 << 10);
        auto accepted = side.accept_all();
        // Both producers' records are in the rings before the consumer takes any: 1000 from
        // producer 0, 10 from producer 1 (64 B each).
        auto addrs = side.addrs;
        auto sent = submit_to(1, [addrs]() -> future<std::pair<uint64_t, uint64_t>> {
            static std::vector<rdma::connection> conns;
            static std::vector<rdma::ring_producer> prods;
            for (unsigned i = 0; i < 2; ++i) {
                conns.push_back(co_await rdma::connect_rc(addrs[i]));
                prods.push_back(
                    co_await rdma::ring_producer::open(conns.back(), *conns.back().peer_region()));
            }
            std::vector<future<>> fs;
            std::vector<std::vector<char>> keep;
            keep.reserve(1010);
            for (uint32_t s = 0; s < 1000; ++s) {
                keep.push_back(make_record(0, s, 64));
                fs.push_back(prods[0].send(std::span<const char>(keep.back().data(), 64)));
            }
            for (uint32_t s = 0; s < 10; ++s) {
                keep.push_back(make_record(1, s, 64));
                fs.push_back(prods[1].send(std::span<const char>(keep.back().data(), 64)));
            }
            co_await when_all_succeed(std::move(fs));
            std::pair<uint64_t, uint64_t> d{prods[0].stats().doorbells, prods[1].stats().doorbells};
            prods.clear();
            conns.clear();
            co_return d;
        });
        co_await std::move(accepted);
        auto [d0, d1] = co_await std::move(sent);
        // Every doorbell reached the consumer (so both rings hold everything).
        bool all_in = co_await eventually([&] {
            return side.fan.ring(0).stats().doorbells == d0 && side.fan.ring(1).stats().doorbells == d1;
        });
        RDMA_CHECK(all_in);
        std::vector<unsigned> order;
        std::array<uint32_t, 2> next{0, 0};
        std::string first_error;
        for (int k = 0; k < 1010; ++k) {
            rdma::fan_in_message m = co_await side.fan.receive();
            std::string e = check_record(m, next[m.producer]++, 64);
            if (!e.empty() && first_error.empty()) {
                first_error = e;
            }
            order.push_back(m.producer);
        }
        EXPECT_EQ(first_error, "");
        // Round robin: the slow producer's 10 records are among the first 20 received.
        EXPECT_EQ(std::count(order.begin(), order.begin() + 20, 1u), 10);
        EXPECT_EQ(next[0], 1000u);
        EXPECT_EQ(next[1], 10u);
    });
    EXPECT_EQ(rc, 0);
}

namespace {

/// 4 producers x 3,000 checksummed records through 8 KiB rings into a consumer that pauses;
/// with `poll`, the rings poll their commit indices.
void four_producers_checksummed(bool poll) {
    int rc = run_rdma(2, [poll]() -> future<> {
        constexpr unsigned producers = 4;
        constexpr uint32_t count = 3000;
        fan_in_side side(producers, 8 << 10, poll); // ~2.7 records of 3 KB: many wraps, much waiting
        auto accepted = side.accept_all();
        auto addrs = side.addrs;
        auto sent = submit_to(1, [addrs]() -> future<> {
            std::vector<future<uint64_t>> ps;
            for (unsigned p = 0; p < producers; ++p) {
                ps.push_back(produce(addrs[p], p, count));
            }
            co_await when_all_succeed(std::move(ps));
        });
        co_await std::move(accepted);
        std::vector<uint32_t> next(producers);
        std::string first_error = co_await receive_checked(side, next, producers * count);
        co_await std::move(sent);
        EXPECT_EQ(first_error, "");
        for (unsigned p = 0; p < producers; ++p) {
            EXPECT_EQ(next[p], count) << "producer " << p;
            EXPECT_GT(side.fan.ring(p).stats().wraps, 100u) << "producer " << p;
            EXPECT_GT(side.fan.ring(p).stats().pushes, 0u) << "producer " << p << " never waited";
            if (poll) {
                const auto& st = side.fan.ring(p).stats();
                std::printf("  ring %u: %lu messages, %lu polled batches, %lu doorbells, %lu wake requests\n",
                            p, st.messages, st.polled, st.doorbells, st.wake_requests);
                EXPECT_GT(st.polled, 0u) << "producer " << p;
            }
        }
    });
    EXPECT_EQ(rc, 0);
}

/// Producer 2 sends 100 records and then its connection is dropped; 0 and 1 send 2000 each:
/// all of them arrive, and producer 2's ring reports the error.
void dead_producer_does_not_wedge(bool poll) {
    int rc = run_rdma(2, [poll]() -> future<> {
        constexpr unsigned producers = 3;
        fan_in_side side(producers, 16 << 10, poll);
        auto accepted = side.accept_all();
        auto addrs = side.addrs;
        // Producer 2 sends 100 records and then its connection is dropped; 0 and 1 send 2000
        // each.
        auto sent = submit_to(1, [addrs]() -> future<> {
            std::vector<future<uint64_t>> ps;
            ps.push_back(produce(addrs[0], 0, 2000));
            ps.push_back(produce(addrs[1], 1, 2000));
            rdma::connection c = co_await rdma::connect_rc(addrs[2]);
            rdma::ring_producer prod = co_await rdma::ring_producer::open(c, *c.peer_region());
            std::vector<std::vector<char>> keep;
            std::vector<future<>> fs;
            for (uint32_t s = 0; s < 100; ++s) {
                keep.push_back(make_record(2, s, record_size(2, s)));
            }
            for (uint32_t s = 0; s < 100; ++s) {
                fs.push_back(prod.send(std::span<const char>(keep[s].data(), keep[s].size())));
            }
            co_await when_all_succeed(std::move(fs));
            c.close(); // dies
            auto late = prod.send(std::span<const char>(keep[0].data(), keep[0].size()));
            bool failed = false;
            try {
                co_await std::move(late);
            } catch (const rdma::connection_closed&) {
                failed = true;
            }
            EXPECT_TRUE(failed);
            co_await when_all_succeed(std::move(ps));
        });
        co_await std::move(accepted);
        std::array<uint32_t, producers> next{};
        std::string first_error;
        for (uint32_t k = 0; k < 4100; ++k) {
            rdma::fan_in_message m =
                co_await with_timeout(steady_clock_type::now() + patience, side.fan.receive());
            uint32_t seq = next[m.producer]++;
            std::string e = check_record(m, seq, record_size(m.producer, seq));
            if (!e.empty() && first_error.empty()) {
                first_error = e;
            }
        }
        co_await std::move(sent);
        EXPECT_EQ(first_error, "");
        EXPECT_EQ(next[0], 2000u);
        EXPECT_EQ(next[1], 2000u);
        EXPECT_EQ(next[2], 100u);
        bool failed = co_await eventually([&] { return bool(side.fan.ring(2).error()); });
        EXPECT_TRUE(failed) << "the dead producer's ring saw no error";
    });
    EXPECT_EQ(rc, 0);
}

} // namespace

TEST(ring_fan_in, four_producers_checksummed_sequences_small_rings_slow_consumer) {
    four_producers_checksummed(false);
}

TEST(ring_fan_in, four_producers_checksummed_sequences_small_rings_slow_consumer_polling) {
    four_producers_checksummed(true);
}

TEST(ring_fan_in, a_dead_producer_does_not_wedge_the_others) {
    dead_producer_does_not_wedge(false);
}

TEST(ring_fan_in, a_dead_producer_does_not_wedge_the_others_polling) {
    dead_producer_does_not_wedge(true);
}

TEST(ring_fan_in, producers_on_their_own_tags_beside_another_tagged_user) {
    // Each ring runs on the tags its producer chose (ring_fan_in::attach(i, c, tags)),
    // and every connection also carries tag 0's values (one per 10 records) to another reader.
    int rc = run_rdma(2, []() -> future<> {
        constexpr unsigned producers = 2;
        constexpr uint32_t count = 2000;
        fan_in_side side(producers, 8 << 10);
        auto accepted = side.accept_all({rdma::ring_tags{2, 3}, rdma::ring_tags{9, 5}});
        auto addrs = side.addrs;
        auto sent = submit_to(1, [addrs]() -> future<> {
            std::vector<future<uint64_t>> ps;
            ps.push_back(produce(addrs[0], 0, count, rdma::ring_tags{2, 3}, true));
            ps.push_back(produce(addrs[1], 1, count, rdma::ring_tags{9, 5}, true));
            co_await when_all_succeed(std::move(ps));
        });
        co_await std::move(accepted);
        std::vector<future<>> readers;
        std::vector<rdma::immediate_channel> others;
        for (unsigned p = 0; p < producers; ++p) {
            others.push_back(side.conns[p].immediates(0));
        }
        for (unsigned p = 0; p < producers; ++p) {
            readers.push_back([](rdma::immediate_channel& ch, unsigned p) -> future<> {
                for (uint32_t v = 0; v < count / 10; ++v) {
                    uint32_t got = co_await ch.next();
                    EXPECT_EQ(got, v) << "producer " << p << ": tag 0 out of order or misrouted";
                }
            }(others[p], p));
        }
        std::vector<uint32_t> next(producers);
        std::string first_error = co_await receive_checked(side, next, producers * count);
        co_await when_all_succeed(std::move(readers));
        co_await std::move(sent);
        EXPECT_EQ(first_error, "");
        for (unsigned p = 0; p < producers; ++p) {
            EXPECT_EQ(next[p], count) << "producer " << p;
            EXPECT_GT(side.fan.ring(p).stats().pushes, 0u) << "producer " << p << " never waited";
        }
    });
    EXPECT_EQ(rc, 0);
}
