// The native RDMA KV protocol in the Soft-RoCE guest: shoal-kv's store in registered
// memory served over RDMA and TCP at once (2 shards), kv::client over both transports, GET by
// location and by cached location (READ validated by version and checksum), PUT inline and by
// grant → WRITE_WITH_IMM commit, grant expiry and disconnect, writes outside a grant, and the
// zero-copy calls (PUT from / GET into the caller's registered buffer; copied over TCP).
// Sized for the emulated guest: small memory, values up to 256 KB, bounded loops.
#include "kv/store/internal/record.hh"
#include "rdma_kv_util.hh"

#include <map>
#include <string>
#include <vector>

using namespace shoal;
using namespace shoal::rdma_test;
using namespace shoal::kv_test;

namespace {

/// A raw client of one server shard speaking the wire format directly (the protocol tests).
struct raw_client {
    rdma::connection c;
    net::message_connection msgs;
    rdma::immediate_channel commits;
    uint32_t next_id = 1;

    static future<raw_client> connect(net::socket_address a) {
        raw_client r;
        r.c = co_await rdma::connect_rc(a);
        r.msgs = r.c.messages();
        r.commits = r.c.immediates(kv::wire::commit_tag);
        co_return r;
    }
    future<kv::wire::response> call(kv::wire::request q, std::string_view key, std::string_view value = {}) {
        q.id = next_id++;
        q.key_len = uint16_t(key.size());
        std::string m(reinterpret_cast<const char*>(&q), sizeof(q));
        m.append(key);
        m.append(value);
        co_await msgs.send(net::temporary_buffer::copy_of(m));
        co_return co_await next();
    }
    future<kv::wire::response> next() {
        auto m = co_await msgs.receive();
        RDMA_CHECK(m && m->size() >= sizeof(kv::wire::response));
        kv::wire::response r;
        std::memcpy(&r, m->get(), sizeof(r));
        co_return r;
    }
    future<kv::wire::response> grant(std::string_view key, uint32_t len) {
        kv::wire::request q;
        q.code = kv::wire::op::grant;
        q.value_len = len;
        return call(q, key);
    }
};

} // namespace

TEST(kv_rdma, tcp_and_rdma_share_one_store_in_registered_memory) {
    int rc = run_rdma(2, []() -> future<> {
        co_await with_kv([](rdma_kv& kvs) -> future<> {
            uint64_t regs = rdma::registration_count() - co_await pool_registrations();
            kv::client& tcp = kvs.client(kv::endpoint_transport::tcp);
            kv::client& over_rdma = kvs.client(kv::endpoint_transport::rdma);
            // 40 keys over both shards, sizes from 1 B (inline both ways) to 200 KB (READ, grant).
            std::vector<size_t> sizes = {1, 100, 1000, 4000, 5000, 20000, 64 << 10, 200 << 10};
            std::map<std::string, std::string> want;
            for (unsigned i = 0; i < 40; ++i) {
                std::string k = "k" + std::to_string(i);
                want[k] = value_of(k, 1, sizes[i % sizes.size()]);
                if (i % 2) {
                    RDMA_CHECK(co_await tcp.set(k, want[k], i, 0) == kv::store_outcome::stored);
                } else {
                    RDMA_CHECK(co_await over_rdma.set(k, want[k], i, 0) == kv::store_outcome::stored);
                }
            }
            for (auto& [k, v] : want) {
                auto a = co_await tcp.get(k);
                auto b = co_await over_rdma.get(k);
                RDMA_CHECK(a && a->data == v);
                RDMA_CHECK(b && b->data == v);
                EXPECT_EQ(a->flags, b->flags);
                EXPECT_EQ(a->cas, b->cas) << "the RDMA version is the item's CAS unique";
            }
            // The other commands over RDMA, checked over TCP.
            RDMA_CHECK(co_await over_rdma.add("k0", "x", 0, 0) == kv::store_outcome::not_stored);
            RDMA_CHECK(co_await over_rdma.replace("nope", "x", 0, 0) == kv::store_outcome::not_stored);
            auto cur = co_await over_rdma.get("k1");
            RDMA_CHECK(co_await over_rdma.cas("k1", "new", cur->cas + 1) == kv::store_outcome::exists);
            RDMA_CHECK(co_await over_rdma.cas("k1", "new", cur->cas) == kv::store_outcome::stored);
            RDMA_CHECK((co_await tcp.get("k1"))->data == "new");
            RDMA_CHECK(co_await over_rdma.set("n", "41", 0, 0) == kv::store_outcome::stored);
            RDMA_CHECK(co_await over_rdma.incr("n", 1) == std::optional<uint64_t>(42));
            RDMA_CHECK((co_await tcp.get("n"))->data == "42");
            RDMA_CHECK(co_await over_rdma.remove("k2"));
            RDMA_CHECK(!(co_await tcp.get("k2")));
            RDMA_CHECK(!(co_await over_rdma.remove("k2")));
            // append/prepend over RDMA: inline, and granted (70 KB: WRITTEN into a slice, then
            // joined by the server); a missing key is not stored and its grant returns.
            const std::string tail(70000, 't');
            RDMA_CHECK(co_await over_rdma.append("k5", tail) == kv::store_outcome::stored);
            RDMA_CHECK(co_await over_rdma.prepend("k5", "head-") == kv::store_outcome::stored);
            want["k5"] = "head-" + want["k5"] + tail;
            RDMA_CHECK((co_await tcp.get("k5"))->data == want["k5"]);
            RDMA_CHECK((co_await over_rdma.get("k5"))->data == want["k5"]);
            RDMA_CHECK((co_await over_rdma.get("k5"))->flags == 5u);
            RDMA_CHECK(co_await over_rdma.append("nope", tail) == kv::store_outcome::not_stored);
            RDMA_CHECK(co_await over_rdma.prepend("nope", "x") == kv::store_outcome::not_stored);
            EXPECT_EQ(co_await kvs.refs(), 0u) << "the grant of a refused append was not returned";
            RDMA_CHECK(co_await over_rdma.touch("k4", 3600));
            RDMA_CHECK((co_await over_rdma.get("k4"))->data == want["k4"]);
            RDMA_CHECK(!(co_await over_rdma.touch("k2", 3600)));
            RDMA_CHECK(co_await over_rdma.touch("k4", -1));
            RDMA_CHECK(!(co_await tcp.get("k4"))); // touched into the past over RDMA: expired over TCP
            RDMA_CHECK(!(co_await over_rdma.get("k4")));
            // gat over RDMA: a small value inline, a large one READ from the location it answers;
            // into the past, the value is returned once and expired after it.
            RDMA_CHECK(co_await over_rdma.set("k6", "gat-me", 6) == kv::store_outcome::stored);
            auto g = co_await over_rdma.gat("k6", 3600);
            RDMA_CHECK(g && g->data == "gat-me" && g->flags == 6u);
            auto large = co_await over_rdma.gat("k5", 3600);
            RDMA_CHECK(large && large->data == want["k5"]);
            RDMA_CHECK(!(co_await over_rdma.gat("k2", 3600)));
            g = co_await over_rdma.gat("k6", -1);
            RDMA_CHECK(g && g->data == "gat-me");
            RDMA_CHECK(!(co_await tcp.get("k6")));
            RDMA_CHECK(!(co_await over_rdma.get("k6")));
            // stats over RDMA: the whole server's (its shards summed), the same as over TCP.
            std::vector<kv::server_stats> by_rdma = co_await over_rdma.stats();
            std::vector<kv::server_stats> by_tcp = co_await tcp.stats();
            RDMA_CHECK(by_rdma.size() == 1 && by_tcp.size() == 1);
            for (std::string_view name : {"pid", "threads", "curr_items", "limit_maxbytes"}) {
                EXPECT_FALSE(kv::stat_value(by_rdma[0], name).empty()) << name;
                EXPECT_EQ(kv::stat_value(by_rdma[0], name), kv::stat_value(by_tcp[0], name)) << name;
            }
            EXPECT_EQ(by_rdma[0].size(), by_tcp[0].size());
            std::vector<std::string> ask;
            ask.push_back("k3");
            ask.push_back("k2");
            ask.push_back("k5");
            auto many = co_await over_rdma.get_many(ask);
            RDMA_CHECK(many.size() == 3 && many[0] && !many[1] && many[2] && many[2]->data == want["k5"]);
            // Only the grants registered anything (their per-grant slice); items never did.
            uint64_t grants = co_await kvs.sum([](kv::rdma_server& r) { return r.stats().grants; });
            EXPECT_GT(grants, 0u);
            EXPECT_EQ(rdma::registration_count() - co_await pool_registrations() - regs, grants)
                << "a registration per item or per GET";
            EXPECT_EQ(co_await kvs.refs(), 0u);
            // flush_all over RDMA flushes both shards: delayed, nothing changes yet; at once,
            // every key is gone over both protocols (k3 by its cached location too).
            co_await over_rdma.flush_all(100);
            RDMA_CHECK((co_await tcp.get("k3"))->data == want["k3"]);
            co_await over_rdma.flush_all();
            const std::vector<std::string> gone = {"k1", "k3", "k4", "k5", "n"}; // named: g++ 12
            for (const std::string& k : gone) {
                RDMA_CHECK(!(co_await tcp.get(k)));
                RDMA_CHECK(!(co_await over_rdma.get(k)));
            }
            EXPECT_EQ(co_await kvs.sum([](kv::rdma_server& r) { return r.stats().bad_requests; }), 0u);
        });
    });
    EXPECT_EQ(rc, 0);
}

TEST(kv_rdma, a_cached_location_is_read_without_the_server_and_never_goes_stale) {
    int rc = run_rdma(2, []() -> future<> {
        co_await with_kv([](rdma_kv& kvs) -> future<> {
            kv::client& tcp = kvs.client(kv::endpoint_transport::tcp);
            auto* t = &kvs.transport();
            const std::string k = "cached";
            RDMA_CHECK(co_await tcp.set(k, value_of(k, 1, 8000), 0, 0) == kv::store_outcome::stored);
            RDMA_CHECK(co_await fetch(*t, k) == value_of(k, 1, 8000)); // control GET + READ
            EXPECT_EQ(t->stats().control_gets, 1u);
            uint64_t requests = co_await kvs.sum([](kv::rdma_server& r) { return r.stats().requests; });
            for (int i = 0; i < 20; ++i) {
                RDMA_CHECK(co_await fetch(*t, k) == value_of(k, 1, 8000));
            }
            EXPECT_EQ(t->stats().direct_reads, 20u);
            EXPECT_EQ(co_await kvs.sum([](kv::rdma_server& r) { return r.stats().requests; }), requests)
                << "a cached GET reached the server";
            // Overwritten over TCP: the cached location no longer validates; the new value comes
            // through the server.
            RDMA_CHECK(co_await tcp.set(k, value_of(k, 2, 8000), 0, 0) == kv::store_outcome::stored);
            RDMA_CHECK(co_await fetch(*t, k) == value_of(k, 2, 8000));
            EXPECT_EQ(t->stats().cache_misses, 1u);
            // Deleted: a miss, never the old bytes.
            RDMA_CHECK(co_await fetch(*t, k) == value_of(k, 2, 8000));
            RDMA_CHECK(co_await tcp.remove(k));
            RDMA_CHECK(co_await fetch(*t, k) == "<miss>");
            EXPECT_EQ(t->stats().cache_misses, 2u);
            // Expired (exptime 1 s; the servers' clock moves once a second): the cached location is
            // refused by its exptime even before the server unlinks the item.
            RDMA_CHECK(co_await tcp.set(k, value_of(k, 3, 8000), 0, 1) == kv::store_outcome::stored);
            RDMA_CHECK(co_await fetch(*t, k) == value_of(k, 3, 8000));
            // Looked for from 2.5 s on, until it misses: a busy host may run the tick late.
            co_await sleep(std::chrono::milliseconds(2500));
            RDMA_CHECK(co_await eventually_async([&]() -> future<bool> {
                const std::string v = co_await fetch(*t, k);
                RDMA_CHECK(v == "<miss>" || v == value_of(k, 3, 8000));
                co_return v == "<miss>";
            }));
            // Flushed (flush_all as the text command runs it, on every shard): at once, and at a
            // delayed flush's deadline with nothing reaching the server in between, where only
            // the clock's tick can kill the record a cached READ sees.
            RDMA_CHECK(co_await tcp.set(k, value_of(k, 4, 8000), 0, 0) == kv::store_outcome::stored);
            RDMA_CHECK(co_await fetch(*t, k) == value_of(k, 4, 8000));
            co_await kvs.servers.invoke_on_all([](kv::server& s) { s.store().flush_all(0); });
            RDMA_CHECK(co_await fetch(*t, k) == "<miss>");
            RDMA_CHECK(co_await tcp.set(k, value_of(k, 5, 8000), 0, 0) == kv::store_outcome::stored);
            RDMA_CHECK(co_await fetch(*t, k) == value_of(k, 5, 8000)); // the location is cached again
            uint64_t invalid = t->stats().invalid_reads;
            // Touched (on its shard; the others miss): the record is sealed again with its new
            // exptime, so the cached location still reads without the server.
            uint64_t direct = t->stats().direct_reads;
            co_await kvs.servers.invoke_on_all(
                [&k](kv::server& s) { s.store().touch(k, kv::hash_key(k), 3600); });
            RDMA_CHECK(co_await fetch(*t, k) == value_of(k, 5, 8000));
            EXPECT_EQ(t->stats().direct_reads, direct + 1);
            EXPECT_EQ(t->stats().invalid_reads, invalid) << "a touched record read as torn";
            co_await kvs.servers.invoke_on_all(
                [](kv::server& s) { s.store().flush_all(2); }); // dead in 1-2 s
            co_await sleep(std::chrono::milliseconds(3000));
            RDMA_CHECK(co_await eventually_async([&]() -> future<bool> {
                const std::string v = co_await fetch(*t, k);
                RDMA_CHECK(v == "<miss>" || v == value_of(k, 5, 8000));
                co_return v == "<miss>";
            }));
            EXPECT_GT(t->stats().invalid_reads, invalid)
                << "the cached READ found a live record after the flush";
            // Churn: one key rewritten 300 times over TCP in several sizes while the RDMA client
            // reads it; every value read is one that was written, whole.
            const std::string hot = "hot";
            RDMA_CHECK(co_await tcp.set(hot, value_of(hot, 0, 3000), 0, 0) == kv::store_outcome::stored);
            bool writing = true;
            auto write_all = [&]() -> future<> {
                try {
                    for (unsigned v = 1; v <= 300; ++v) {
                        RDMA_CHECK(co_await tcp.set(hot, value_of(hot, v, 2000 + (v % 3) * 1500), 0, 0) ==
                                   kv::store_outcome::stored);
                    }
                } catch (...) {
                    writing = false;
                    throw;
                }
                writing = false;
            };
            future<> writer = write_all();
            unsigned reads = 0;
            while ((writing || reads < 50) && reads < 20000) {
                std::string got = co_await fetch(*t, hot);
                unsigned v = unsigned(std::stoul(got.substr(hot.size() + 1)));
                RDMA_CHECK(got == value_of(hot, v, 2000 + (v % 3) * 1500) ||
                           (v == 0 && got == value_of(hot, 0, 3000)));
                ++reads;
            }
            co_await std::move(writer);
            std::printf("churn: %u reads, %lu direct, %lu invalid READs retried, %lu control GETs\n", reads,
                        t->stats().direct_reads, t->stats().invalid_reads, t->stats().control_gets);
        });
    });
    EXPECT_EQ(rc, 0);
}

// A cached GET holds a short key inline and a long one in a string: keys of every length
// around those limits are READ by their cached locations, and when one was overwritten the GET
// goes on through the server with the same key (into a pool string and into a registered
// buffer). The keys' bytes differ everywhere, so a key copied wrong would READ another record or
// miss.
TEST(kv_rdma, cached_gets_of_keys_of_every_length_read_directly_and_retry_through_the_server) {
    int rc = run_rdma(1, []() -> future<> {
        co_await with_kv([](rdma_kv& kvs) -> future<> {
            kv::client& tcp = kvs.client(kv::endpoint_transport::tcp);
            auto& t = kvs.transport();
            rdma::buffer dst = rdma::shard_context::local().pool().allocate(kv::get_into_capacity(250, 200));
            for (size_t len : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 64, 250}) {
                std::string k;
                for (size_t i = 0; i < len; ++i) {
                    k += char('a' + (i * 7 + len) % 26);
                }
                RDMA_CHECK(co_await tcp.set(k, value_of(k, 1, 200), 0, 0) == kv::store_outcome::stored);
                RDMA_CHECK(co_await fetch(t, k) == value_of(k, 1, 200)); // caches the location
                const uint64_t direct = t.stats().direct_reads;
                RDMA_CHECK(co_await fetch(t, k) == value_of(k, 1, 200));
                auto placed = co_await t.get_into(k, rdma::span_of(dst, 0, dst.capacity()));
                RDMA_CHECK(placed && std::string_view(dst.data() + placed->offset, placed->length) ==
                                         value_of(k, 1, 200));
                EXPECT_EQ(t.stats().direct_reads, direct + 2) << len << "-byte key";
                // Overwritten: the cached READ fails validation and the GET retries by the key.
                const uint64_t misses = t.stats().cache_misses;
                RDMA_CHECK(co_await tcp.set(k, value_of(k, 2, 150), 0, 0) == kv::store_outcome::stored);
                RDMA_CHECK(co_await fetch(t, k) == value_of(k, 2, 150));
                RDMA_CHECK(co_await tcp.set(k, value_of(k, 3, 120), 0, 0) == kv::store_outcome::stored);
                placed = co_await t.get_into(k, rdma::span_of(dst, 0, dst.capacity()));
                RDMA_CHECK(placed && std::string_view(dst.data() + placed->offset, placed->length) ==
                                         value_of(k, 3, 120));
                EXPECT_EQ(t.stats().cache_misses, misses + 2) << len << "-byte key";
            }
        });
    });
    EXPECT_EQ(rc, 0);
}

TEST(kv_rdma, the_client_sets_both_inline_limits_and_may_time_its_cached_gets) {
    int rc = run_rdma(2, []() -> future<> {
        kv::rdma_server_config server_1k; // a server limit the values below straddle
        server_1k.inline_get_max = 1024;
        co_await with_kv(
            [](rdma_kv& kvs) -> future<> {
                kv::client& tcp = kvs.client(kv::endpoint_transport::tcp);
                const std::string small = "v500", mid = "v2000", big = "v70000";
                RDMA_CHECK(co_await tcp.set(small, value_of(small, 1, 500), 0, 0) ==
                           kv::store_outcome::stored);
                RDMA_CHECK(co_await tcp.set(mid, value_of(mid, 1, 2000), 0, 0) == kv::store_outcome::stored);
                RDMA_CHECK(co_await tcp.set(big, value_of(big, 1, 70000), 0, 0) == kv::store_outcome::stored);
                // GET: how many of three control GETs came back inline and how many needed a READ.
                using counts = std::pair<uint64_t, uint64_t>;
                auto gets = [&](std::optional<uint32_t> limit) -> future<counts> {
                    kv::rdma_client_options o;
                    o.location_cache = 0;
                    o.inline_get_max = limit;
                    auto& t = kvs.transport(o);
                    RDMA_CHECK(co_await fetch(t, small) == value_of(small, 1, 500));
                    RDMA_CHECK(co_await fetch(t, mid) == value_of(mid, 1, 2000));
                    RDMA_CHECK(co_await fetch(t, big) == value_of(big, 1, 70000));
                    EXPECT_EQ(t.stats().control_gets, 3u);
                    co_return counts{t.stats().inline_values, t.stats().reads};
                };
                EXPECT_EQ(co_await gets(std::nullopt), counts(1, 2)) << "the server's 1 KB";
                EXPECT_EQ(co_await gets(0), counts(0, 3)) << "a location only";
                EXPECT_EQ(co_await gets(4096), counts(2, 1));
                EXPECT_EQ(co_await gets(1 << 20), counts(2, 1))
                    << "70 KB does not fit a message: a READ whatever the limit";
                // PUT: the client's limit decides inline or granted; both store the value.
                for (size_t limit : {size_t(0), size_t(8192)}) {
                    kv::rdma_client_options o;
                    o.inline_put_max = limit;
                    auto& t = kvs.transport(o);
                    const std::string k = "put" + std::to_string(limit);
                    RDMA_CHECK(co_await t.store(kv::internal::store_op::set, k, value_of(k, 1, 8000), 0, 0,
                                                0) == kv::store_outcome::stored);
                    RDMA_CHECK(co_await t.store(kv::internal::store_op::set, k, value_of(k, 2, 100), 0, 0,
                                                0) == kv::store_outcome::stored);
                    EXPECT_EQ(t.stats().inline_puts, limit ? 2u : 0u);
                    EXPECT_EQ(t.stats().granted_puts, limit ? 0u : 2u);
                    RDMA_CHECK((co_await tcp.get(k))->data == value_of(k, 2, 100));
                }
                // Timing: only GETs served by a cached location are timed, each in its parts.
                kv::rdma_client_options o;
                o.time_cached_gets = true;
                auto& t = kvs.transport(o);
                for (int i = 0; i < 4; ++i) {
                    RDMA_CHECK(co_await fetch(t, mid) == value_of(mid, 1, 2000));
                }
                EXPECT_EQ(t.stats().direct_reads, 3u);
                EXPECT_EQ(t.stats().timed_gets, 3u);
                EXPECT_GT(t.stats().timed_read_ns, 0u);
                EXPECT_GT(t.stats().timed_after_ns, 0u);
                auto& untimed = kvs.transport();
                RDMA_CHECK(co_await fetch(untimed, mid) == value_of(mid, 1, 2000));
                RDMA_CHECK(co_await fetch(untimed, mid) == value_of(mid, 1, 2000));
                EXPECT_EQ(untimed.stats().direct_reads, 1u);
                EXPECT_EQ(untimed.stats().timed_gets, 0u);
            },
            server_1k);
    });
    EXPECT_EQ(rc, 0);
}

TEST(kv_rdma, many_large_puts_in_flight_are_granted_written_and_committed) {
    int rc = run_rdma(2, []() -> future<> {
        kv::rdma_server_config rc;
        rc.max_grants = 8; // fewer than the puts in flight: some are refused as busy, none lost
        co_await with_kv(
            [](rdma_kv& kvs) -> future<> {
                kv::client& tcp = kvs.client(kv::endpoint_transport::tcp);
                kv::rdma_client_options every_put_granted;
                every_put_granted.inline_put_max = 0; // 5 KB-212 KB: some would fit inline
                auto* t = &kvs.transport(every_put_granted);
                std::vector<future<kv::store_outcome>> puts;
                std::vector<std::string> vals;
                for (unsigned i = 0; i < 24; ++i) {
                    vals.push_back(value_of("big" + std::to_string(i), i, 5000 + i * 9000));
                }
                for (unsigned i = 0; i < 24; ++i) {
                    puts.push_back(
                        t->store(kv::internal::store_op::set, "big" + std::to_string(i), vals[i], i, 0, 0));
                }
                unsigned stored = 0;
                unsigned busy = 0;
                unsigned some_stored = 0;
                for (unsigned i = 0; i < puts.size(); ++i) {
                    try {
                        RDMA_CHECK(co_await std::move(puts[i]) == kv::store_outcome::stored);
                        ++stored;
                        some_stored = i;
                    } catch (const kv::client_error& e) {
                        RDMA_CHECK(std::string(e.what()).find("too many grants") != std::string::npos);
                        ++busy;
                    }
                }
                std::printf("24 puts in flight: %u stored, %u refused as busy\n", stored, busy);
                EXPECT_GE(stored, 8u);
                for (unsigned i = 0; i < 24; ++i) {
                    auto v = co_await tcp.get("big" + std::to_string(i));
                    if (v) {
                        RDMA_CHECK(v->data == vals[i]);
                        EXPECT_EQ(v->flags, i);
                    }
                }
                EXPECT_EQ(co_await kvs.sum([](kv::rdma_server& r) { return r.stats().commits; }),
                          uint64_t(stored));
                EXPECT_EQ(co_await kvs.sum([](kv::rdma_server& r) { return r.stats().grants_active; }), 0u);
                EXPECT_EQ(t->stats().granted_puts, 24u);
                EXPECT_EQ(co_await kvs.refs(), 0u);
                // add through a grant over an existing key: not stored, old value kept.
                RDMA_CHECK(co_await t->store(kv::internal::store_op::add, "big" + std::to_string(some_stored),
                                             value_of("x", 1, 50000), 0, 0,
                                             0) == kv::store_outcome::not_stored);
                RDMA_CHECK((co_await tcp.get("big" + std::to_string(some_stored)))->data ==
                           vals[some_stored]);
            },
            rc, size_t(16) << 20);
    });
    EXPECT_EQ(rc, 0);
}

TEST(kv_rdma, uncommitted_grants_expire_and_a_disconnect_returns_them) {
    int rc = run_rdma(2, []() -> future<> {
        kv::rdma_server_config rc;
        // The expiry is the subject; 10 s also leaves room to see the grant held first on a busy
        // host in the sanitizer build (a stall past the timeout would expire it before the look).
        rc.grant_timeout = std::chrono::milliseconds(10000);
        co_await with_kv(
            [](rdma_kv& kvs) -> future<> {
                const std::string k = key_on(0, 2, "g");
                raw_client raw = co_await raw_client::connect(kvs.rdma_addr);
                auto g = co_await raw.grant(k, 50000);
                RDMA_CHECK(g.code == kv::wire::status::ok && g.len == 50000 && g.rkey != 0);
                EXPECT_EQ(co_await kvs.refs(), 1u) << "the granted item is held";
                auto expired = co_await raw.next(); // nothing committed: the server gives up
                RDMA_CHECK(expired.code == kv::wire::status::expired && expired.id == g.id);
                EXPECT_EQ(co_await kvs.sum([](kv::rdma_server& r) { return r.stats().grants_expired; }), 1u);
                EXPECT_EQ(co_await kvs.refs(), 0u);
                // A commit after the expiry (a zero-length WRITE_WITH_IMM with the token) is ignored and
                // counted; the key is not stored.
                co_await raw.commits.write_with_imm({}, rdma::remote_region{g.addr, g.rkey, 0}, 0, g.token);
                RDMA_CHECK(co_await eventually_async([&]() -> future<bool> {
                    co_return co_await kvs.sum([](kv::rdma_server& r) { return r.stats().bad_commits; }) == 1;
                }));
                kv::wire::request get;
                get.code = kv::wire::op::get;
                auto miss = co_await raw.call(get, k);
                EXPECT_EQ(miss.code, kv::wire::status::not_found);
                // flush_all takes no key: one with bytes after its header is refused, nothing flushed.
                kv::wire::request flush;
                flush.code = kv::wire::op::flush_all;
                auto refused = co_await raw.call(flush, "junk");
                EXPECT_EQ(refused.code, kv::wire::status::bad_request);
                // Nor does stats; without bytes it answers memcached's stats text.
                kv::wire::request stats;
                stats.code = kv::wire::op::stats;
                EXPECT_EQ((co_await raw.call(stats, "junk")).code, kv::wire::status::bad_request);
                auto counted_stats = co_await raw.call(stats, {});
                EXPECT_EQ(counted_stats.code, kv::wire::status::ok);
                EXPECT_GT(counted_stats.inline_len, 100u) << "the stats text comes inline";
                // A storage mode the server does not know is refused, not read as a set.
                kv::wire::request odd;
                odd.code = kv::wire::op::store;
                odd.how = kv::wire::mode(9);
                odd.value_len = 1;
                auto unknown = co_await raw.call(odd, k, "v");
                EXPECT_EQ(unknown.code, kv::wire::status::bad_request);
                EXPECT_EQ((co_await raw.call(get, k)).code, kv::wire::status::not_found);
                // Three grants, then the client goes away: all three return.
                for (int i = 0; i < 3; ++i) {
                    RDMA_CHECK((co_await raw.grant(key_on(0, 2, k + std::to_string(i) + "_"), 70000)).code ==
                               kv::wire::status::ok);
                }
                raw.c.close();
                RDMA_CHECK(co_await eventually_async([&]() -> future<bool> {
                    co_return co_await kvs.sum([](kv::rdma_server& r) { return r.stats().grants_active; }) ==
                            0 &&
                        co_await kvs.refs() == 0;
                }));
                uint64_t dropped =
                    co_await kvs.sum([](kv::rdma_server& r) { return r.stats().grants_dropped; });
                uint64_t expired_more =
                    co_await kvs.sum([](kv::rdma_server& r) { return r.stats().grants_expired; });
                EXPECT_EQ(dropped + expired_more - 1, 3u);
                // A client that asks for flush_all and hangs up as soon as the server has the
                // request, likely before the answer (five times): the flush still happens, and
                // the server goes on serving.
                kv::client& tcp = kvs.client(kv::endpoint_transport::tcp);
                for (int i = 0; i < 5; ++i) {
                    RDMA_CHECK(co_await tcp.set(k, "x", 0, 0) == kv::store_outcome::stored);
                    raw_client quitter = co_await raw_client::connect(kvs.rdma_addr);
                    kv::wire::request flush;
                    flush.code = kv::wire::op::flush_all;
                    flush.id = 1;
                    std::string m(reinterpret_cast<const char*>(&flush), sizeof(flush));
                    uint64_t before = co_await kvs.sum([](kv::rdma_server& r) { return r.stats().requests; });
                    co_await quitter.msgs.send(net::temporary_buffer::copy_of(m));
                    // (send resolves once the transport took the message; a close now could drop it)
                    for (auto until = std::chrono::steady_clock::now() + patience;
                         std::chrono::steady_clock::now() < until;) {
                        if (co_await kvs.sum([](kv::rdma_server& r) { return r.stats().requests; }) >
                            before) {
                            break;
                        }
                    }
                    quitter.c.close();
                    RDMA_CHECK(co_await eventually_async(
                        [&]() -> future<bool> { co_return !(co_await tcp.get(k)); }));
                }
                raw_client after = co_await raw_client::connect(kvs.rdma_addr);
                RDMA_CHECK((co_await after.call(get, k)).code == kv::wire::status::not_found);
            },
            rc);
    });
    EXPECT_EQ(rc, 0);
}

TEST(kv_rdma, a_write_outside_the_grant_closes_the_offender_and_harms_nothing) {
    int rc = run_rdma(2, []() -> future<> {
        co_await with_kv([](rdma_kv& kvs) -> future<> {
            kv::client& tcp = kvs.client(kv::endpoint_transport::tcp);
            // Neighbours on shard 0, stored before and after the grant (same slab class).
            std::vector<std::string> keys;
            for (int i = 0; i < 6; ++i) {
                keys.push_back(key_on(0, 2, "n" + std::to_string(i) + "_"));
                RDMA_CHECK(co_await tcp.set(keys.back(), value_of(keys.back(), 1, 30000), 0, 0) ==
                           kv::store_outcome::stored);
            }
            const std::string k = key_on(0, 2, "victim");
            rdma::buffer junk = rdma::shard_context::local().pool().allocate(4096);
            std::memset(junk.data(), 'X', 4096);
            struct attempt {
                const char* what;
                int64_t offset; // from the start of the granted slice
                uint32_t len;
            };
            for (attempt a : {attempt{"past the end", 30000, 64}, attempt{"straddling the end", 29990, 64},
                              attempt{"before the start", -128, 64}}) {
                raw_client raw = co_await raw_client::connect(kvs.rdma_addr);
                auto g = co_await raw.grant(k, 30000);
                RDMA_CHECK(g.code == kv::wire::status::ok);
                rdma::remote_region slice{g.addr, g.rkey, g.len};
                bool failed = false;
                try {
                    co_await raw.c.write(
                        rdma::span_of(junk, 0, a.len),
                        rdma::remote_region{uint64_t(int64_t(g.addr) + a.offset), g.rkey, a.len});
                } catch (const std::exception& e) {
                    failed = true;
                    std::printf("write %s: %s\n", a.what, e.what());
                }
                EXPECT_TRUE(failed) << "a write " << a.what << " of the grant succeeded";
                EXPECT_FALSE(raw.c.usable()) << "the offender's connection survived";
                // Inside the slice the same client could have written (checked by the other tests).
                (void)slice;
            }
            // The server dropped the offenders' connections and grants, and every neighbour is intact.
            RDMA_CHECK(co_await eventually_async([&]() -> future<bool> {
                co_return co_await kvs.sum([](kv::rdma_server& r) { return r.stats().connections; }) == 0;
            }));
            for (auto& n : keys) {
                auto v = co_await tcp.get(n);
                RDMA_CHECK(v && v->data == value_of(n, 1, 30000));
            }
            RDMA_CHECK(!(co_await tcp.get(k)));
            EXPECT_EQ(co_await kvs.sum([](kv::rdma_server& r) { return r.stats().grants_dropped; }), 3u);
            EXPECT_EQ(co_await kvs.refs(), 0u);
            // A well-behaved client still works.
            auto* t = &kvs.transport();
            RDMA_CHECK(co_await t->store(kv::internal::store_op::set, k, value_of(k, 9, 30000), 0, 0, 0) ==
                       kv::store_outcome::stored);
            RDMA_CHECK(co_await fetch(*t, k) == value_of(k, 9, 30000));
        });
    });
    EXPECT_EQ(rc, 0);
}

namespace {

/// The `len` bytes at `offset` of `b`.
std::string bytes_of(const rdma::buffer& b, size_t offset, size_t len) {
    return std::string(b.data() + offset, len);
}

/// A pool buffer of this shard holding `value` at `offset`.
rdma::buffer registered_copy(std::string_view value, size_t offset = 0) {
    rdma::buffer b = rdma::shard_context::local().pool().allocate(offset + value.size());
    std::memcpy(b.data() + offset, value.data(), value.size());
    return b;
}

/// Whether `f` fails with a `client_error` of kind bad_request.
template <typename T>
future<bool> refused(future<T> f) {
    try {
        co_await std::move(f);
    } catch (const kv::client_error& e) {
        co_return e.code() == kv::client_errc::bad_request;
    }
    co_return false;
}

} // namespace

TEST(kv_rdma, zero_copy_puts_and_gets_use_the_callers_registered_buffers) {
    int rc = run_rdma(2, []() -> future<> {
        co_await with_kv([](rdma_kv& kvs) -> future<> {
            kv::client& c = kvs.client(kv::endpoint_transport::rdma);
            kv::client& tcp = kvs.client(kv::endpoint_transport::tcp);
            rdma::memory_pool& pool = rdma::shard_context::local().pool();
            constexpr size_t n = 64 * 1024;
            const std::string k = "zc";
            const std::string v1 = value_of(k, 1, n);
            // set_from a 64 KB value at offset 100 of a registered buffer; the buffer is dropped at
            // once: the call's hold keeps its memory from being handed out again meanwhile.
            {
                rdma::buffer src = registered_copy(v1, 100);
                future<kv::store_outcome> put = c.set_from(k, src, 100, n, 7, 0);
                src.reset();
                rdma::buffer other = pool.allocate(n + 100); // would reuse src's memory without the hold
                std::memset(other.data(), 'X', n + 100);
                RDMA_CHECK(co_await std::move(put) == kv::store_outcome::stored);
            }
            auto plain = co_await c.get(k);
            RDMA_CHECK(plain && plain->data == v1 && plain->flags == 7u);
            rdma::buffer dst = pool.allocate(kv::get_into_capacity(k.size(), n));
            auto at = co_await c.get_into(k, dst);
            RDMA_CHECK(at && at->length == n && at->flags == 7u && at->cas == plain->cas);
            EXPECT_EQ(at->offset, sizeof(kv::item) + k.size()) << "the value lies after the record header";
            RDMA_CHECK(bytes_of(dst, at->offset, at->length) == v1);

            // A value set over plain set (TCP) is readable with get_into.
            const std::string v2 = value_of(k, 2, n - 1000);
            RDMA_CHECK(co_await tcp.set(k, v2, 3, 0) == kv::store_outcome::stored);
            at = co_await c.get_into(k, dst);
            RDMA_CHECK(at && at->flags == 3u && bytes_of(dst, at->offset, at->length) == v2);

            // The other storage forms: add of an existing key, cas with the unique get_into gave.
            rdma::buffer src3 = registered_copy(value_of(k, 3, n));
            RDMA_CHECK(co_await c.add_from(k, src3, 0, n) == kv::store_outcome::not_stored);
            RDMA_CHECK(co_await c.cas_from(k, src3, 0, n, at->cas + 1000) == kv::store_outcome::exists);
            RDMA_CHECK(co_await c.cas_from(k, src3, 0, n, at->cas, 9) == kv::store_outcome::stored);
            RDMA_CHECK(co_await c.replace_from("zc-none", src3, 0, n) == kv::store_outcome::not_stored);
            RDMA_CHECK((co_await tcp.get(k))->data == value_of(k, 3, n));

            // The transport's counters, and a cached location that went stale: get_into READs it,
            // the record does not validate, the GET is retried through the server into dst.
            auto* t = &kvs.transport();
            const std::string k2 = "zc2";
            rdma::buffer src4 = registered_copy(value_of(k2, 1, n));
            RDMA_CHECK(co_await t->store_from(kv::internal::store_op::set, k2, rdma::span_of(src4, 0, n), 0,
                                              0, 0) == kv::store_outcome::stored);
            EXPECT_EQ(t->stats().granted_puts, 1u);
            EXPECT_EQ(t->stats().zero_copy_puts, 1u);
            rdma::local_span into = rdma::span_of(dst, 0, dst.capacity());
            auto at2 = co_await t->get_into(k2, into);
            RDMA_CHECK(at2 && bytes_of(dst, at2->offset, at2->length) == value_of(k2, 1, n));
            EXPECT_EQ(t->stats().direct_reads, 1u) << "the PUT's reply gave the location";
            EXPECT_EQ(t->stats().zero_copy_gets, 1u);
            RDMA_CHECK(co_await tcp.set(k2, value_of(k2, 2, n), 0, 0) == kv::store_outcome::stored);
            at2 = co_await t->get_into(k2, into);
            RDMA_CHECK(at2 && bytes_of(dst, at2->offset, at2->length) == value_of(k2, 2, n));
            EXPECT_EQ(t->stats().cache_misses, 1u);
            EXPECT_GE(t->stats().invalid_reads, 1u);
            EXPECT_EQ(t->stats().zero_copy_gets, 2u);
            // A plain PUT and GET move neither zero-copy counter.
            RDMA_CHECK(co_await t->store(kv::internal::store_op::set, k2, value_of(k2, 3, n), 0, 0, 0) ==
                       kv::store_outcome::stored);
            RDMA_CHECK(co_await fetch(*t, k2) == value_of(k2, 3, n));
            EXPECT_EQ(t->stats().zero_copy_puts, 1u);
            EXPECT_EQ(t->stats().zero_copy_gets, 2u);
            EXPECT_EQ(t->stats().granted_puts, 2u);

            // Small values go inline both ways (copied): the bytes are where get_into says.
            rdma::buffer small = registered_copy(value_of("zs", 1, 300));
            RDMA_CHECK(co_await c.set_from("zs", small, 0, 300) == kv::store_outcome::stored);
            auto ats = co_await c.get_into("zs", dst);
            RDMA_CHECK(ats && bytes_of(dst, ats->offset, ats->length) == value_of("zs", 1, 300));

            // Eight 64 KB puts from slices of one buffer in flight at once, then eight get_into.
            rdma::buffer many = pool.allocate(8 * n);
            std::vector<future<kv::store_outcome>> puts;
            for (unsigned i = 0; i < 8; ++i) {
                std::string v = value_of("zm" + std::to_string(i), i, n);
                std::memcpy(many.data() + i * n, v.data(), n);
                puts.push_back(c.set_from("zm" + std::to_string(i), many, i * n, n, i, 0));
            }
            for (auto& p : puts) {
                RDMA_CHECK(co_await std::move(p) == kv::store_outcome::stored);
            }
            std::vector<rdma::buffer> dsts;
            std::vector<future<std::optional<kv::placed_value>>> gets;
            for (unsigned i = 0; i < 8; ++i) {
                dsts.push_back(pool.allocate(kv::get_into_capacity(3, n)));
                gets.push_back(c.get_into("zm" + std::to_string(i), dsts.back()));
            }
            for (unsigned i = 0; i < 8; ++i) {
                auto p = co_await std::move(gets[i]);
                RDMA_CHECK(p && p->flags == i &&
                           bytes_of(dsts[i], p->offset, p->length) ==
                               value_of("zm" + std::to_string(i), i, n));
            }

            // Unusable buffers: too small for the record (a cached location or not), empty, a
            // range past the end, another shard's pool.
            rdma::buffer tiny = pool.allocate(4096);
            RDMA_CHECK(co_await refused(c.get_into(k, tiny)));
            RDMA_CHECK(co_await refused(t->get_into(k2, rdma::span_of(tiny, 0, tiny.capacity()))));
            rdma::buffer just_value = pool.allocate(n); // holds the value, not the record
            RDMA_CHECK(co_await refused(c.get_into(k, just_value)));
            rdma::buffer none;
            RDMA_CHECK(co_await refused(c.get_into(k, none)));
            RDMA_CHECK(co_await refused(c.set_from(k, none, 0, 0)));
            RDMA_CHECK(co_await refused(c.set_from(k, tiny, 100, tiny.capacity())));
            rdma::buffer foreign =
                co_await submit_to(1, [] { return rdma::shard_context::local().pool().allocate(4096); });
            RDMA_CHECK(co_await refused(c.set_from(k, foreign, 0, 10)));
            RDMA_CHECK(co_await refused(c.get_into(k, foreign)));
            foreign.reset();                                              // travels home to shard 1
            RDMA_CHECK((co_await tcp.get(k))->data == value_of(k, 3, n)); // nothing was stored
        });
    });
    EXPECT_EQ(rc, 0);
}

TEST(kv_rdma, get_many_into_places_every_value_in_its_slot_of_one_registered_buffer) {
    int rc = run_rdma(2, []() -> future<> {
        co_await with_kv([](rdma_kv& kvs) -> future<> {
            kv::client& c = kvs.client(kv::endpoint_transport::rdma);
            kv::client& tcp = kvs.client(kv::endpoint_transport::tcp);
            rdma::memory_pool& pool = rdma::shard_context::local().pool();
            // Twelve keys over both server shards: small values (answered inline, copied) and
            // 20 KB ones (READ into the slot); one key missing in the middle.
            std::vector<std::string> keys;
            std::map<std::string, std::string> want;
            for (unsigned i = 0; i < 12; ++i) {
                keys.push_back("gm" + std::to_string(i));
                if (i == 5) {
                    continue;
                }
                want[keys.back()] = value_of(keys.back(), 1, i % 3 ? 20000 : 100);
                RDMA_CHECK(co_await tcp.set(keys.back(), want[keys.back()], i, 0) ==
                           kv::store_outcome::stored);
            }
            const size_t slot = kv::get_into_capacity(4, 20000);
            rdma::buffer dst = pool.allocate(keys.size() * slot);
            auto check_all = [&](const std::vector<std::optional<kv::placed_value>>& got) {
                bool ok = got.size() == keys.size();
                for (size_t i = 0; ok && i < keys.size(); ++i) {
                    auto it = want.find(keys[i]);
                    if (it == want.end()) {
                        ok = !got[i];
                        continue;
                    }
                    ok = got[i] && got[i]->offset >= i * slot &&
                         got[i]->offset + got[i]->length <= (i + 1) * slot && got[i]->flags == unsigned(i) &&
                         bytes_of(dst, got[i]->offset, got[i]->length) == it->second;
                }
                return ok;
            };
            // First without cached locations (control GETs), then with them (READs only).
            for (int round = 0; round < 2; ++round) {
                std::memset(dst.data(), 'Z', dst.capacity());
                RDMA_CHECK(check_all(co_await c.get_many_into(keys, dst, slot)));
            }
            // A value changed behind a cached location: the READ sees it and goes through the server.
            want["gm4"] = value_of("gm4", 2, 19000);
            RDMA_CHECK(co_await tcp.set("gm4", want["gm4"], 4, 0) == kv::store_outcome::stored);
            RDMA_CHECK(check_all(co_await c.get_many_into(keys, dst, slot)));

            // Slots too small for the 20 KB values: the call fails naming the slot it needs; with
            // that slot it works. Nothing was stored or lost meanwhile.
            const size_t small_slot = kv::get_into_capacity(4, 100) + 8;
            size_t needed = 0;
            try {
                co_await c.get_many_into(keys, dst, small_slot);
            } catch (const kv::client_error& e) {
                needed = e.code() == kv::client_errc::bad_request ? e.needed_capacity() : 0;
            }
            RDMA_CHECK(needed >= 20000 && needed <= slot);
            RDMA_CHECK(check_all(co_await c.get_many_into(keys, dst, slot)));
            for (auto& [k, v] : want) {
                RDMA_CHECK((co_await tcp.get(k))->data == v);
            }

            // Refused before sending: slots past the buffer, a zero slot, a bad key; an empty list
            // is an empty answer.
            RDMA_CHECK(co_await refused(c.get_many_into(keys, dst, slot + dst.capacity() / keys.size())));
            RDMA_CHECK(co_await refused(c.get_many_into(keys, dst, 0)));
            const std::vector<std::string> with_bad_key{"gm0", "bad key"};
            RDMA_CHECK(co_await refused(c.get_many_into(with_bad_key, dst, slot)));
            RDMA_CHECK((co_await c.get_many_into(std::vector<std::string>(), dst, slot)).empty());
        });
    });
    EXPECT_EQ(rc, 0);
}

TEST(kv_rdma, zero_copy_calls_over_tcp_copy) {
    int rc = run_rdma(1, []() -> future<> {
        co_await with_kv([](rdma_kv& kvs) -> future<> {
            kv::client& tcp = kvs.client(kv::endpoint_transport::tcp);
            rdma::memory_pool& pool = rdma::shard_context::local().pool();
            constexpr size_t n = 64 * 1024;
            const std::string v = value_of("zt", 1, n);
            rdma::buffer src = registered_copy(v, 8);
            RDMA_CHECK(co_await tcp.set_from("zt", src, 8, n, 5, 0) == kv::store_outcome::stored);
            RDMA_CHECK((co_await tcp.get("zt"))->data == v);
            rdma::buffer dst = pool.allocate(n); // over TCP the value alone is enough
            auto at = co_await tcp.get_into("zt", dst);
            RDMA_CHECK(at && at->offset == 0 && at->length == n && at->flags == 5u);
            RDMA_CHECK(bytes_of(dst, 0, n) == v);
            RDMA_CHECK(!(co_await tcp.get_into("zt-missing", dst)));
            rdma::buffer tiny = pool.allocate(1024);
            RDMA_CHECK(co_await refused(tcp.get_into("zt", tiny)));
            RDMA_CHECK(co_await tcp.cas_from("zt", src, 8, 100, at->cas) == kv::store_outcome::stored);
            RDMA_CHECK((co_await tcp.get("zt"))->data == v.substr(0, 100));
        });
    });
    EXPECT_EQ(rc, 0);
}
