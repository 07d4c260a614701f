// The store alone (no reactor): memcached's storage, expiry, flush, CAS, incr/decr rules, the
// memory limit with LRU eviction and page moves between slab classes, and the counters. Time is
// set by the test (store::set_time), never slept.
#include "kv/store/hash.hh"
#include "kv/store/internal/record.hh"
#include "kv/store/store.hh"

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal::kv;

namespace {

constexpr uint32_t t0 = 1'800'000'000; // a Unix time well after any "server start" below

std::unique_ptr<store> make_store(size_t memory = 64 << 20, size_t max_item = 1 << 20,
                                  bool remote_readable = false) {
    store_config cfg;
    cfg.memory_limit = memory;
    cfg.max_item_size = max_item;
    cfg.remote_readable = remote_readable;
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

// Memory under pressure: a set that fits -I succeeds on a full store, evictions follow LRU order
// across classes (pages move between classes, their hot items rescued), a store with room
// evicts nothing.

namespace {

/// A value of `n` bytes that names its key and a version, so that a wrong value is never
/// mistaken for the right one.
std::string value_of(std::string_view key, uint64_t version, size_t n) {
    std::string v = std::string(key) + "#" + std::to_string(version) + "#";
    std::string out;
    out.reserve(n);
    while (out.size() < n) {
        out.append(v);
    }
    out.resize(n);
    return out;
}

/// Sizes from 64 B to 64 KB, log-uniform (every slab class in that range gets items).
size_t mixed_size(std::mt19937_64& rng, size_t lo = 64, size_t hi = 64 << 10) {
    std::uniform_real_distribution<double> d(std::log(double(lo)), std::log(double(hi)));
    return size_t(std::exp(d(rng)));
}

/// Pages of the store's memory limit (each page holds chunks of one class).
size_t pages_of(store& s) {
    size_t n = 0;
    for (const auto& c : s.slab_classes()) {
        n += c.pages;
    }
    return n;
}

} // namespace

TEST(kv_store, a_set_that_replaces_a_small_value_succeeds_on_a_two_page_store) {
    // -m 3 with one shard: two pages of 1 MB. The third set needs a third size class while
    // each page belongs to one of the first two.
    auto s = make_store(3 << 20);
    std::string c(5000, 'c'), a2(2000, 'A');
    ASSERT_EQ(put(*s, "a", std::string(10, 'a')), store_result::stored);
    ASSERT_EQ(put(*s, "c", c), store_result::stored);
    ASSERT_EQ(put(*s, "a", a2), store_result::stored)
        << "the old value of a must not block its own replacement";
    EXPECT_EQ(get(*s, "a"), a2);
    EXPECT_EQ(get(*s, "c"), c) << "the empty page moved: nothing had to be evicted";
    EXPECT_EQ(s->stats().evictions, 0u);
    EXPECT_EQ(s->stats().slab_reassigns, 1u);
    EXPECT_LE(pages_of(*s), 2u);
    // Every size still stores on two pages (evicting in LRU order when it must).
    for (size_t n : {size_t(1), size_t(100), size_t(3000), size_t(40000), size_t(300000), size_t(1000000)}) {
        std::string k = "k" + std::to_string(n);
        ASSERT_EQ(put(*s, k, std::string(n, 'x')), store_result::stored) << n;
        EXPECT_EQ(get(*s, k).size(), n);
        EXPECT_LE(pages_of(*s), 2u);
    }
}

TEST(kv_store, small_sets_succeed_on_a_store_filled_with_mixed_sizes) {
    // One shard of -m 64 -I 2m --smp 2: 32 MB, pages of 2 MB.
    auto s = make_store(32 << 20, 2 << 20);
    std::mt19937_64 rng(42);
    for (int i = 0; i < 4000; ++i) {
        std::string k = "fill" + std::to_string(i);
        ASSERT_EQ(put(*s, k, value_of(k, 0, mixed_size(rng))), store_result::stored) << i;
    }
    ASSERT_GT(s->stats().evictions, 0u) << "the store is full";
    std::uniform_int_distribution<size_t> small(0, 1000);
    for (int i = 0; i < 500; ++i) {
        // New keys and keys of the fill (whose old value stands in the way of the new one).
        std::string k = i % 2 ? "small" + std::to_string(i) : "fill" + std::to_string(rng() % 4000);
        std::string v = value_of(k, 1, small(rng));
        ASSERT_EQ(put(*s, k, v), store_result::stored) << i;
        ASSERT_EQ(get(*s, k), v) << i;
    }
    EXPECT_EQ(s->stats().store_no_memory, 0u);
    EXPECT_LE(s->stats().total_malloced, (32u << 20)) << "the limit holds";
}

TEST(kv_store, a_nearly_empty_store_evicts_nothing) {
    // One shard of the default -m 64 --smp 2 (31 pages) and a cache client over 2,000 keys of
    // 32 B..16 KB each (~16 MB, half the memory; two dozen classes): a get that misses is
    // followed by a set, and some keys are pipelined (24 sets, then 24 gets). Pages are handed
    // out as classes first need them, so classes of few items hold mostly empty pages; the
    // classes that grow must get memory from them, not evict.
    auto s = make_store(32 << 20);
    std::mt19937_64 rng(7);
    constexpr int keys = 2000;
    std::vector<size_t> size(keys);
    for (auto& n : size) {
        n = 32 + rng() % (16 << 10);
    }
    auto key_of = [](int k) { return "key" + std::to_string(k); };
    for (int round = 0; round < 400; ++round) {
        for (int j = 0; j < 24; ++j) {
            int k = int(rng() % keys);
            if (get(*s, key_of(k)) == "<miss>") {
                ASSERT_EQ(put(*s, key_of(k), value_of(key_of(k), 0, size[k])), store_result::stored);
            }
        }
        int first = int(rng() % keys);
        for (int j = 0; j < 24; ++j) {
            int k = (first + j) % keys;
            ASSERT_EQ(put(*s, key_of(k), value_of(key_of(k), 0, size[k])), store_result::stored);
        }
        for (int j = 0; j < 24; ++j) {
            int k = (first + j) % keys;
            ASSERT_EQ(get(*s, key_of(k)), value_of(key_of(k), 0, size[k])) << "round " << round;
        }
        if (round % 20 == 0) {
            s->set_time(s->now() + 1);
        }
    }
    EXPECT_EQ(s->stats().evictions, 0u);
    EXPECT_GT(s->stats().curr_items, 1900u);
    EXPECT_GE(s->slab_classes().size(), 15u) << "many classes in use";
}

TEST(kv_store, a_page_move_keeps_the_hot_items_of_the_class_that_gives_it) {
    auto s = make_store(4 << 20); // three pages
    std::string one(1000, '1');
    // Fill all three pages with one class (~880 items a page); every third item is read later.
    int n = 0;
    while (pages_of(*s) < 3 || s->slab_classes()[0].free_chunks > 0) {
        std::string k = "k" + std::to_string(n++);
        ASSERT_EQ(put(*s, k, value_of(k, 0, 1000)), store_result::stored);
    }
    ASSERT_EQ(s->stats().evictions, 0u);
    s->set_time(t0 + 10);
    for (int i = 0; i < n; i += 3) {
        std::string k = "k" + std::to_string(i);
        ASSERT_EQ(get(*s, k), value_of(k, 0, 1000));
    }
    // A new class of large values needs a page: the small class's coldest items go, the hot
    // ones on the page that moves are moved into the chunks those freed.
    s->set_time(t0 + 20);
    for (int i = 0; i < 5; ++i) {
        ASSERT_EQ(put(*s, "big" + std::to_string(i), std::string(100000, 'b')), store_result::stored);
    }
    ASSERT_EQ(s->stats().slab_reassigns, 1u);
    EXPECT_GT(s->stats().slab_reassign_rescues, 0u);
    size_t lost_cold = 0;
    for (int i = 0; i < n; ++i) {
        std::string k = "k" + std::to_string(i);
        std::string got = get(*s, k);
        if (i % 3 == 0) {
            EXPECT_EQ(got, value_of(k, 0, 1000)) << "hot item " << i << " was lost";
        } else if (got == "<miss>") {
            ++lost_cold;
        } else {
            EXPECT_EQ(got, value_of(k, 0, 1000));
        }
    }
    EXPECT_EQ(lost_cold, s->stats().evictions);
    EXPECT_GT(lost_cold, 0u);
}

TEST(kv_store, with_many_pages_per_class_a_class_that_has_pages_evicts_its_own_items) {
    // Seven pages, two classes asked for: a store with many pages per class. A class that has
    // pages and no free chunk evicts its own coldest item rather than taking a free chunk of a
    // larger class, where its item would hold four times the memory it needs.
    auto s = make_store(8 << 20);
    ASSERT_EQ(put(*s, "large", value_of("large", 0, 4000)), store_result::stored);
    int n = 0;
    while (pages_of(*s) < 7 || s->slab_classes()[0].free_chunks > 0) {
        std::string k = "k" + std::to_string(n++);
        ASSERT_EQ(put(*s, k, value_of(k, 0, 1000)), store_result::stored);
    }
    ASSERT_EQ(s->stats().evictions, 0u);
    auto before = s->slab_classes();
    ASSERT_EQ(before.size(), 2u);
    ASSERT_EQ(before[1].items, 1u);
    ASSERT_GT(before[1].free_chunks, 0u) << "the larger class has free chunks to take";
    ASSERT_EQ(put(*s, "one more", value_of("one more", 0, 1000)), store_result::stored);
    auto after = s->slab_classes();
    EXPECT_EQ(s->stats().evictions, 1u);
    EXPECT_EQ(after[0].items, before[0].items);
    EXPECT_EQ(after[1].items, 1u) << "the new item went into the larger class";
    EXPECT_EQ(get(*s, "k0"), "<miss>") << "the coldest item of its class went";
    EXPECT_EQ(get(*s, "one more"), value_of("one more", 0, 1000));
    EXPECT_EQ(get(*s, "large"), value_of("large", 0, 4000));
}

TEST(kv_store, a_page_move_invalidates_the_old_records_of_moved_items) {
    auto s = make_store(4 << 20, 1 << 20, true);
    int n = 0;
    std::vector<std::pair<std::string, item*>> where;
    while (pages_of(*s) < 3 || s->slab_classes()[0].free_chunks > 0) {
        std::string k = "k" + std::to_string(n++);
        ASSERT_EQ(put(*s, k, value_of(k, 0, 1000)), store_result::stored);
        where.emplace_back(k, s->peek(k, hash_key(k)));
    }
    s->set_time(t0 + 10);
    for (int i = 0; i < n; i += 2) {
        get(*s, where[i].first);
    }
    std::vector<uint64_t> cas;
    for (auto& [k, it] : where) {
        cas.push_back(it->cas);
    }
    s->set_time(t0 + 20);
    for (int i = 0; i < 5; ++i) {
        ASSERT_EQ(put(*s, "big" + std::to_string(i), std::string(100000, 'b')), store_result::stored);
    }
    ASSERT_GT(s->stats().slab_reassign_rescues, 0u);
    size_t moved = 0;
    for (size_t i = 0; i < where.size(); ++i) {
        const auto& [k, old] = where[i];
        item* now = s->peek(k, hash_key(k));
        record::view v;
        if (now) {
            ASSERT_EQ(record::validate(reinterpret_cast<const char*>(now), store::record_bytes(now), k, &v),
                      record::check::ok)
                << k;
            EXPECT_EQ(v.value, value_of(k, 0, 1000));
            EXPECT_EQ(v.version, cas[i]) << "a moved item keeps its CAS unique";
        }
        if (now != old) {
            ++moved;
            // A reader's cached location of the old record no longer validates as this key.
            EXPECT_NE(
                record::validate(reinterpret_cast<const char*>(old), record::bytes(k.size(), 1000), k, &v),
                record::check::ok)
                << k;
        }
    }
    EXPECT_GT(moved, s->stats().evictions) << "some items were moved, not only evicted";
    for (int i = 0; i < n; i += 2) {
        EXPECT_EQ(get(*s, where[i].first), value_of(where[i].first, 0, 1000)) << "hot items stay";
    }
}

TEST(kv_store, randomized_against_a_model_under_memory_pressure) {
    // A map of what was stored is the model; values name their key and version. Thousands of
    // sets, gets, deletes, appends and incrs of mixed sizes against 6 pages, some items held
    // by references: every set that fits is stored, a get returns the last value set or a
    // miss (evicted), never another value, and the counters agree with a walk.
    for (bool remote : {false, true}) {
        auto s = make_store(6 << 20, 1 << 20, remote);
        std::mt19937_64 rng(remote ? 11 : 12);
        constexpr int keys = 3000;
        std::map<std::string, std::string> model;
        std::vector<std::pair<item*, std::string>> held;
        auto key_of = [](int i) { return "key:" + std::to_string(i); };
        auto walk = [&] {
            uint64_t items = 0, bytes = 0;
            for (int i = 0; i < keys; ++i) {
                std::string k = key_of(i);
                item* it = s->peek(k, hash_key(k));
                auto m = model.find(k);
                if (m == model.end()) {
                    ASSERT_EQ(it, nullptr) << k << " was never stored or was deleted";
                    continue;
                }
                if (!it) {
                    model.erase(m); // evicted
                    continue;
                }
                ASSERT_EQ(it->value(), m->second) << k;
                ++items;
                bytes += item::memcached_size(k.size(), it->value_len);
            }
            EXPECT_EQ(s->stats().curr_items, items);
            EXPECT_EQ(s->stats().bytes, bytes);
            uint64_t class_items = 0, requested = 0;
            for (const auto& c : s->slab_classes()) {
                class_items += c.items;
                requested += c.mem_requested;
            }
            EXPECT_EQ(class_items, items);
            EXPECT_EQ(requested, bytes);
            EXPECT_LE(s->stats().total_malloced, uint64_t(6) << 20);
        };
        for (int op = 0; op < 10000; ++op) {
            std::string k = key_of(int(rng() % keys));
            uint64_t h = hash_key(k);
            unsigned what = unsigned(rng() % 100);
            if (what < 50) {
                size_t n = rng() % 8 == 0 ? mixed_size(rng, 16 << 10, 300 << 10) : mixed_size(rng, 1, 4000);
                std::string v = value_of(k, uint64_t(op), n);
                ASSERT_EQ(put(*s, k, v), store_result::stored) << "op " << op << ", " << n << " bytes";
                model[k] = v;
            } else if (what < 80) {
                item* it = s->get(k, h);
                auto m = model.find(k);
                if (!it) {
                    if (m != model.end()) {
                        model.erase(m);
                    }
                    continue;
                }
                ASSERT_NE(m, model.end()) << k << " was never stored or was deleted";
                ASSERT_EQ(it->value(), m->second) << k;
                if (held.size() < 3 && rng() % 4 == 0 && s->ref(it)) {
                    held.emplace_back(it, m->second);
                }
            } else if (what < 88) {
                if (s->remove(k, h) == store_result::stored) {
                    ASSERT_EQ(model.count(k), 1u) << k << " was never stored or was deleted";
                }
                model.erase(k);
            } else if (what < 94) {
                std::string tail = "+" + std::to_string(op);
                store_result r = put(*s, k, tail, store_mode::append);
                auto m = model.find(k);
                if (r == store_result::stored) {
                    ASSERT_NE(m, model.end());
                    m->second += tail;
                } else if (r == store_result::not_stored && m != model.end()) {
                    model.erase(m); // it had been evicted
                }
            } else if (what < 97) {
                std::string v = std::to_string(rng() % 1000);
                ASSERT_EQ(put(*s, k, v), store_result::stored);
                model[k] = v;
                uint64_t r = 0;
                ASSERT_EQ(s->add_delta(k, h, true, 1000000, &r), delta_result::ok);
                model[k] = std::to_string(r);
            } else if (!held.empty()) {
                auto [it, v] = held.back();
                held.pop_back();
                ASSERT_EQ(it->value(), v) << "a held item's bytes never change";
                s->unref(it);
            }
            if (op % 250 == 0) {
                s->set_time(s->now() + 1);
                s->advance_epoch();
            }
            if (op % 1000 == 0) {
                walk();
            }
        }
        for (auto& [it, v] : held) {
            EXPECT_EQ(it->value(), v);
            s->unref(it);
        }
        walk();
        EXPECT_GT(s->stats().evictions, 100u) << "the store was under pressure";
        EXPECT_GT(s->stats().slab_reassigns, 10u) << "pages changed class";
        EXPECT_EQ(s->stats().store_no_memory, 0u);
    }
}

TEST(kv_store, an_item_read_twice_gets_a_second_chance_at_the_lru_tail) {
    // memcached's segmented LRU keeps items read more than once over items read once or never:
    // here an item read twice that reaches the tail goes back to the head once, and the next
    // item goes instead.
    auto s = make_store(2 << 20); // one page
    auto value = [](std::string_view k) { return value_of(k, 0, 1000); };
    put(*s, "twice", value("twice"));
    put(*s, "once", value("once"));
    int n = 0;
    while (s->slab_classes()[0].free_chunks > 0) {
        std::string k = "f" + std::to_string(n++);
        ASSERT_EQ(put(*s, k, value(k)), store_result::stored);
    }
    ASSERT_EQ(s->stats().evictions, 0u);
    size_t capacity = s->slab_classes()[0].used_chunks;
    ASSERT_EQ(get(*s, "twice"), value("twice"));
    ASSERT_EQ(get(*s, "twice"), value("twice"));
    ASSERT_EQ(get(*s, "once"), value("once"));
    // `capacity` new items: the fill goes, then "twice" reaches the tail and is kept, "once"
    // (read once) goes, then the oldest new item.
    for (size_t i = 0; i < capacity; ++i) {
        std::string k = "new" + std::to_string(i);
        ASSERT_EQ(put(*s, k, value(k)), store_result::stored);
    }
    EXPECT_EQ(s->stats().evictions, capacity);
    EXPECT_EQ(s->peek("once", hash_key("once")), nullptr);
    EXPECT_NE(s->peek("twice", hash_key("twice")), nullptr) << "read twice: a second chance";
    EXPECT_EQ(s->peek("new0", hash_key("new0")), nullptr);
    EXPECT_NE(s->peek("new1", hash_key("new1")), nullptr);
}
