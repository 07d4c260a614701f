// The store alone (no reactor): memcached's storage, expiry, flush, CAS, incr/decr rules, the
// memory limit with LRU eviction and page moves between slab classes, and the counters. Time is
// set by the test (store::set_time), never slept.
#include "kv/hash.hh"
#include "kv/store.hh"

#include <string>

#include <gtest/gtest.h>

using namespace shoal::kv;

namespace {

constexpr uint32_t t0 = 1'800'000'000; // a Unix time well after any "server start" below

std::unique_ptr<store> make_store(size_t memory = 64 << 20, size_t max_item = 1 << 20) {
    store_config cfg;
    cfg.memory_limit = memory;
    cfg.max_item_size = max_item;
    return std::make_unique<store>(cfg, std::make_unique<heap_page_source>(store::page_size_for(cfg)), t0);
}

store_result put(store& s, std::string_view k, std::string_view v, store_mode m = store_mode::set,
                 int64_t exptime = 0, uint32_t flags = 0, uint64_t cas = 0) {
    return s.put(m, k, hash_key(k), flags, exptime, v, cas);
}

std::string get(store& s, std::string_view k) {
    item* it = s.get(k, hash_key(k));
    return it ? std::string(it->value()) : std::string("<miss>");
}

} // namespace

TEST(kv_store, storage_modes) {
    auto s = make_store();
    EXPECT_EQ(put(*s, "a", "1", store_mode::add), store_result::stored);
    EXPECT_EQ(put(*s, "a", "2", store_mode::add), store_result::not_stored);
    EXPECT_EQ(put(*s, "b", "2", store_mode::replace), store_result::not_stored);
    EXPECT_EQ(put(*s, "a", "3", store_mode::replace), store_result::stored);
    EXPECT_EQ(put(*s, "a", "x", store_mode::append, 0, 99), store_result::stored);
    EXPECT_EQ(put(*s, "a", "y", store_mode::prepend), store_result::stored);
    EXPECT_EQ(get(*s, "a"), "y3x");
    EXPECT_EQ(s->peek("a", hash_key("a"))->client_flags, 0u) << "append keeps the old flags";
    EXPECT_EQ(put(*s, "nope", "x", store_mode::append), store_result::not_stored);
    EXPECT_EQ(put(*s, "f", "v", store_mode::set, 0, 0xffffffffu), store_result::stored);
    EXPECT_EQ(s->peek("f", hash_key("f"))->client_flags, 0xffffffffu);
}

TEST(kv_store, cas_uniques) {
    auto s = make_store();
    uint64_t c1 = 0, c2 = 0;
    ASSERT_EQ(s->put(store_mode::set, "k", hash_key("k"), 0, 0, "v1", 0, &c1), store_result::stored);
    EXPECT_EQ(put(*s, "k", "v2", store_mode::cas, 0, 0, c1 + 1), store_result::exists);
    ASSERT_EQ(s->put(store_mode::cas, "k", hash_key("k"), 0, 0, "v2", c1, &c2), store_result::stored);
    EXPECT_GT(c2, c1);
    EXPECT_EQ(put(*s, "k", "v3", store_mode::cas, 0, 0, c1), store_result::exists)
        << "the old unique is stale";
    EXPECT_EQ(put(*s, "missing", "v", store_mode::cas, 0, 0, 1), store_result::not_found);
    EXPECT_EQ(s->stats().cas_hits, 1u);
    EXPECT_EQ(s->stats().cas_badval, 2u);
    EXPECT_EQ(s->stats().cas_misses, 1u);
    EXPECT_EQ(s->remove("k", hash_key("k"), c1), store_result::exists);
    EXPECT_EQ(s->remove("k", hash_key("k"), c2), store_result::stored);
}

TEST(kv_store, exptime_rules) {
    auto s = make_store();
    put(*s, "rel", "v", store_mode::set, 10);
    put(*s, "neg", "v", store_mode::set, -1);
    put(*s, "abs", "v", store_mode::set, int64_t(t0) + 100);
    put(*s, "past", "v", store_mode::set, 60 * 60 * 24 * 30 + 1); // absolute, long before the start
    put(*s, "never", "v");
    EXPECT_EQ(get(*s, "neg"), "<miss>");
    EXPECT_EQ(get(*s, "past"), "<miss>");
    EXPECT_EQ(get(*s, "rel"), "v");
    s->set_time(t0 + 9);
    EXPECT_EQ(get(*s, "rel"), "v");
    s->set_time(t0 + 10);
    EXPECT_EQ(get(*s, "rel"), "<miss>");
    EXPECT_EQ(get(*s, "abs"), "v");
    s->set_time(t0 + 100);
    EXPECT_EQ(get(*s, "abs"), "<miss>");
    s->set_time(t0 + 1'000'000);
    EXPECT_EQ(get(*s, "never"), "v");
    EXPECT_GE(s->stats().get_expired, 3u);
    // touch moves the expiry.
    put(*s, "t", "v", store_mode::set, 5);
    EXPECT_TRUE(s->touch("t", hash_key("t"), 100));
    s->set_time(t0 + 1'000'050);
    EXPECT_EQ(get(*s, "t"), "v");
    EXPECT_FALSE(s->touch("gone", hash_key("gone"), 1));
}

TEST(kv_store, flush_all_now_and_delayed) {
    auto s = make_store();
    put(*s, "a", "1");
    s->flush_all(0);
    EXPECT_EQ(get(*s, "a"), "<miss>");
    put(*s, "b", "2"); // stored in the same second, after the flush: alive
    EXPECT_EQ(get(*s, "b"), "2");
    s->set_time(t0 + 1);
    s->flush_all(10); // memcached's rule: dead from t0 + 1 + 10 - 1
    EXPECT_EQ(get(*s, "b"), "2");
    s->set_time(t0 + 9);
    EXPECT_EQ(get(*s, "b"), "2");
    EXPECT_EQ(s->stats().curr_items, 1u);
    s->set_time(t0 + 10);
    EXPECT_EQ(s->stats().curr_items, 0u) << "the deadline's tick flushes, before any GET looks";
    EXPECT_EQ(get(*s, "b"), "<miss>");
    EXPECT_EQ(s->stats().get_flushed, 0u) << "nothing was left for a GET to find flushed";
    put(*s, "c", "3"); // stored in the deadline's second, after the flush: alive
    EXPECT_EQ(get(*s, "c"), "3");
    // A later flush replaces a pending one; a deadline in the past is now.
    s->flush_all(100);
    s->flush_all(5);
    s->set_time(t0 + 13);
    EXPECT_EQ(get(*s, "c"), "3");
    s->set_time(t0 + 14);
    EXPECT_EQ(get(*s, "c"), "<miss>");
    put(*s, "d", "4");
    s->flush_all(int64_t(t0) - 1'000'000); // an absolute exptime before the server started
    EXPECT_EQ(get(*s, "d"), "<miss>");
    put(*s, "e", "5");
    EXPECT_EQ(get(*s, "e"), "5") << "stored after that flush";
    EXPECT_EQ(s->stats().cmd_flush, 5u);
}

TEST(kv_store, incr_decr_rules) {
    auto s = make_store();
    uint64_t n = 0;
    auto h = hash_key("n");
    put(*s, "n", "10");
    ASSERT_EQ(s->add_delta("n", h, false, 1, &n), delta_result::ok);
    EXPECT_EQ(n, 9u);
    EXPECT_EQ(get(*s, "n"), "9 ") << "a shorter number is padded in place, as memcached does";
    ASSERT_EQ(s->add_delta("n", h, false, 100, &n), delta_result::ok);
    EXPECT_EQ(n, 0u) << "decr stops at 0";
    put(*s, "n", "18446744073709551615");
    ASSERT_EQ(s->add_delta("n", h, true, 2, &n), delta_result::ok);
    EXPECT_EQ(n, 1u) << "incr wraps at 2^64";
    put(*s, "n", "99");
    ASSERT_EQ(s->add_delta("n", h, true, 1, &n), delta_result::ok);
    EXPECT_EQ(get(*s, "n"), "100") << "a longer number gets a new item";
    for (const char* bad : {"abc", "12a", "-5", "", "123456789012345678901234"}) {
        put(*s, "n", bad);
        EXPECT_EQ(s->add_delta("n", h, true, 1, &n), delta_result::non_numeric) << bad;
    }
    EXPECT_EQ(s->add_delta("none", hash_key("none"), true, 1, &n), delta_result::not_found);
}

TEST(kv_store, size_limits) {
    auto s = make_store(64 << 20, 1 << 20);
    std::string key250(250, 'k');
    EXPECT_EQ(put(*s, key250, "v"), store_result::stored);
    // memcached's accounting (its item header with the CAS unique): 56 + key + 1 + value + 2
    // must fit in -I.
    std::string fits((1 << 20) - 56 - 1 - 1 - 2, 'x');
    EXPECT_EQ(put(*s, "k", fits), store_result::stored);
    EXPECT_EQ(get(*s, "k").size(), fits.size());
    EXPECT_EQ(put(*s, "k", fits + "x"), store_result::too_large);
    EXPECT_EQ(get(*s, "k"), "<miss>") << "a failed set drops the old value";
    EXPECT_EQ(s->stats().store_too_large, 1u);
}

TEST(kv_store, lru_eviction_under_memory_limit) {
    auto s = make_store(4 << 20); // four 1 MB pages
    std::string value(1000, 'v');
    // Write far more than fits; keep reading key 0 so that it stays recent.
    for (int i = 0; i < 20000; ++i) {
        ASSERT_EQ(put(*s, "key" + std::to_string(i), value), store_result::stored) << i;
        EXPECT_EQ(get(*s, "key0"), value) << "a recently read item is never the LRU victim (" << i << ")";
    }
    EXPECT_GT(s->stats().evictions, 10000u);
    EXPECT_EQ(get(*s, "key1"), "<miss>") << "an old item was evicted";
    EXPECT_EQ(get(*s, "key19999"), value);
    EXPECT_LE(s->stats().total_malloced, size_t(4) * store::page_size_for({}));
    EXPECT_LE(s->stats().bytes, uint64_t(4) << 20);
}

TEST(kv_store, pages_move_between_classes_when_the_size_mix_changes) {
    auto s = make_store(8 << 20);
    // Fill the memory with small values, then switch to large ones: without moving pages the
    // large class would have no memory at all.
    for (int i = 0; i < 100000; ++i) {
        put(*s, "small" + std::to_string(i), std::string(50, 's'));
    }
    std::string big(100000, 'b');
    for (int i = 0; i < 200; ++i) {
        ASSERT_EQ(put(*s, "big" + std::to_string(i), big), store_result::stored) << i;
    }
    EXPECT_EQ(get(*s, "big199"), big);
    EXPECT_GT(s->stats().slab_reassigns, 0u);
    // Memory in use by live items stays a large share of the limit after the change.
    auto classes = s->slab_classes();
    uint64_t requested = 0;
    for (const auto& c : classes) {
        requested += c.mem_requested;
    }
    EXPECT_EQ(requested, s->stats().bytes);
    EXPECT_GT(double(s->stats().bytes), 0.5 * double(8 << 20)) << "fragmentation after the size change";
}

TEST(kv_store, counters) {
    auto s = make_store();
    put(*s, "a", "1");
    get(*s, "a");
    get(*s, "b");
    s->remove("a", hash_key("a"));
    s->remove("a", hash_key("a"));
    const auto& st = s->stats();
    EXPECT_EQ(st.cmd_set, 1u);
    EXPECT_EQ(st.cmd_get, 2u);
    EXPECT_EQ(st.get_hits, 1u);
    EXPECT_EQ(st.get_misses, 1u);
    EXPECT_EQ(st.delete_hits, 1u);
    EXPECT_EQ(st.delete_misses, 1u);
    EXPECT_EQ(st.curr_items, 0u);
    EXPECT_EQ(st.total_items, 1u);
    EXPECT_EQ(st.bytes, 0u);
}

TEST(kv_store, many_keys_grow_the_table) {
    auto s = make_store(256 << 20);
    for (int i = 0; i < 50000; ++i) {
        put(*s, "k" + std::to_string(i), std::to_string(i));
    }
    for (int i = 0; i < 50000; i += 997) {
        EXPECT_EQ(get(*s, "k" + std::to_string(i)), std::to_string(i));
    }
    EXPECT_EQ(s->stats().curr_items, 50000u);
}

// Item references (replies sent from item memory): a held item's bytes survive delete,
// overwrite, eviction, page moves and in-place incr, and its chunk is reused only after unref.

namespace {

item* hold(store& s, std::string_view k) {
    item* it = s.get(k, hash_key(k));
    EXPECT_NE(it, nullptr) << k;
    EXPECT_TRUE(it && s.ref(it));
    return it;
}

} // namespace

TEST(kv_store, a_held_item_survives_delete_and_overwrite_until_unref) {
    auto s = make_store();
    std::string a(3000, 'a'), b(3000, 'b');
    put(*s, "del", a);
    put(*s, "over", a);
    item* d = hold(*s, "del");
    item* o = hold(*s, "over");
    EXPECT_EQ(s->refs_held(), 2u);
    EXPECT_EQ(s->remove("del", hash_key("del")), store_result::stored);
    EXPECT_EQ(put(*s, "over", b), store_result::stored);
    EXPECT_EQ(get(*s, "del"), "<miss>") << "deleted for every client";
    EXPECT_EQ(get(*s, "over"), b) << "overwritten for every client";
    EXPECT_EQ(s->stats().curr_items, 1u);
    // New items of the same size class must not land in the held chunks.
    for (int i = 0; i < 50; ++i) {
        put(*s, "fill" + std::to_string(i), b);
        EXPECT_NE(s->peek("fill" + std::to_string(i), hash_key("fill" + std::to_string(i))), d);
    }
    EXPECT_EQ(d->value(), a) << "the reply in flight still sends the old bytes";
    EXPECT_EQ(o->value(), a);
    s->unref(d);
    s->unref(o);
    EXPECT_EQ(s->refs_held(), 0u);
    // Now the chunks are free again: the next two items of the class take them.
    put(*s, "next1", b);
    put(*s, "next2", b);
    item* n1 = s->peek("next1", hash_key("next1"));
    item* n2 = s->peek("next2", hash_key("next2"));
    EXPECT_TRUE((n1 == d || n1 == o) && (n2 == d || n2 == o)) << "freed chunks are reused first";
}

TEST(kv_store, incr_of_a_held_item_does_not_change_it_in_place) {
    auto s = make_store();
    put(*s, "n", "100");
    item* held = hold(*s, "n");
    uint64_t r = 0;
    EXPECT_EQ(s->add_delta("n", hash_key("n"), false, 95, &r), delta_result::ok);
    EXPECT_EQ(r, 5u);
    EXPECT_EQ(held->value(), "100") << "a reply in flight keeps its bytes";
    EXPECT_EQ(get(*s, "n"), "5") << "the new value is a new item";
    s->unref(held);
    put(*s, "m", "100");
    EXPECT_EQ(s->add_delta("m", hash_key("m"), false, 95, &r), delta_result::ok);
    EXPECT_EQ(get(*s, "m"), "5  ") << "unheld: in place, padded with spaces as memcached does";
}

TEST(kv_store, eviction_and_page_moves_skip_held_items) {
    auto s = make_store(4 << 20);
    std::string value(1000, 'v');
    put(*s, "oldest", value);
    item* held = hold(*s, "oldest");
    for (int i = 0; i < 20000; ++i) {
        ASSERT_EQ(put(*s, "key" + std::to_string(i), std::string(1000, char('a' + i % 26))),
                  store_result::stored)
            << i;
    }
    EXPECT_GT(s->stats().evictions, 10000u);
    EXPECT_EQ(held->value(), value) << "the LRU tail was held: eviction took others";
    EXPECT_EQ(get(*s, "oldest"), value) << "and it stays linked";
    // A change of size mix moves pages between classes, never the page of the held item.
    std::string big(100000, 'b');
    for (int i = 0; i < 100; ++i) {
        ASSERT_EQ(put(*s, "big" + std::to_string(i), big), store_result::stored) << i;
    }
    EXPECT_GT(s->stats().slab_reassigns, 0u);
    EXPECT_EQ(held->value(), value);
    s->unref(held);
    EXPECT_EQ(s->refs_held(), 0u);
}
