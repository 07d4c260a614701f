// Remotely readable records (kv/store/internal/record.hh) in a store with `remote_readable`: what a
// remote reader copies out of item memory validates exactly while the item is the key's current
// value, (also after a touch, which seals it again) and fails (dead, other key, torn) after a
// delete, an overwrite, an eviction, a flush (at once or at a delayed flush's deadline), a reuse of
// the chunk or a byte changed under it; freed chunks wait for the grace period of epochs. No
// device: the "READ" is a memcpy of the record's bytes, which is what the NIC does.
#include "kv/store/hash.hh"
#include "kv/store/internal/record.hh"
#include "kv/store/store.hh"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal::kv;

namespace {

constexpr uint32_t t0 = 1'800'000'000;

std::unique_ptr<store> make_store(size_t memory = 64 << 20) {
    store_config cfg;
    cfg.memory_limit = memory;
    cfg.remote_readable = true;
    return std::make_unique<store>(cfg, std::make_unique<heap_page_source>(store::page_size_for(cfg)), t0);
}

/// What a remote READ of `it`'s record at this moment copies.
std::vector<char> read_record(const item* it) {
    const char* p = reinterpret_cast<const char*>(it);
    return std::vector<char>(p, p + store::record_bytes(it));
}

record::check check(const std::vector<char>& buf, std::string_view key, record::view* v) {
    return record::validate(buf.data(), buf.size(), key, v);
}

item* put_item(store& s, std::string_view k, std::string_view v, uint32_t flags = 0) {
    uint64_t cas = 0;
    EXPECT_EQ(s.put(store_mode::set, k, hash_key(k), flags, 0, v, 0, &cas), store_result::stored);
    item* it = s.peek(k, hash_key(k));
    EXPECT_NE(it, nullptr);
    EXPECT_EQ(it->cas, cas);
    return it;
}

} // namespace

TEST(kv_record, a_stored_item_validates_with_its_value_flags_and_version) {
    auto s = make_store();
    std::string value(3000, 'v');
    value[17] = 'x';
    item* it = put_item(*s, "alpha", value, 42);
    auto buf = read_record(it);
    EXPECT_EQ(buf.size() % 8, 0u);
    record::view v;
    ASSERT_EQ(check(buf, "alpha", &v), record::check::ok);
    EXPECT_TRUE(v.value == value);
    EXPECT_EQ(v.flags, 42u);
    EXPECT_EQ(v.version, it->cas);
    EXPECT_EQ(check(buf, "alphb", &v), record::check::other_key);
    EXPECT_EQ(check(buf, "alph", &v), record::check::other_key);
    buf.resize(buf.size() - 1);
    EXPECT_EQ(check(buf, "alpha", &v), record::check::short_buf);
}

TEST(kv_record, every_single_byte_change_of_key_value_or_trailer_is_detected) {
    auto s = make_store();
    item* it = put_item(*s, "k1", std::string(200, 'a'), 7);
    const auto good = read_record(it);
    record::view v;
    // Every byte from the header's CAS onwards that the record covers (the LRU/hash links, the
    // access time and the reference count change while an item lives, so they are not covered).
    for (size_t i = offsetof(item, cas); i < good.size(); ++i) {
        if (i >= offsetof(item, time) && i < offsetof(item, time) + 4) {
            continue;
        }
        if (i >= offsetof(item, cls) && i < sizeof(item)) {
            continue; // class, state, reserved, refs
        }
        size_t pad_from = sizeof(item) + 2 + 200;
        if (i >= pad_from && i < record::trailer_offset(2, 200)) {
            continue; // alignment padding
        }
        auto bad = good;
        bad[i] ^= 0x10;
        EXPECT_NE(check(bad, "k1", &v), record::check::ok) << "byte " << i << " changed undetected";
    }
}

TEST(kv_record, a_torn_read_of_two_versions_or_reordered_words_never_validates) {
    auto s = make_store();
    const std::string key = "torn";
    const size_t n = 4000;
    std::mt19937_64 rng(12);
    std::string a(n, 'a');
    for (auto& ch : a) {
        ch = char('a' + rng() % 26); // no two words alike, in all likelihood
    }
    // B differs from A in every word, or in one word only (the hardest mix to tell apart).
    std::string b_all = a, b_one = a;
    for (auto& ch : b_all) {
        ch = char(ch ^ 0x20);
    }
    b_one[1234] ^= 1;
    const size_t value_at = sizeof(item) + key.size();
    for (const std::string* b : {&b_all, &b_one}) {
        auto r1 = read_record(put_item(*s, key, a));
        auto r2 = read_record(put_item(*s, key, *b));
        ASSERT_EQ(r1.size(), r2.size());
        record::view v;
        // A READ of either version's chunk whose value bytes came partly from the other one:
        // a random run of words (the NIC placed part of the READ before the change, part after)
        // or random single words.
        for (int trial = 0; trial < 400; ++trial) {
            const auto& base = trial % 2 ? r1 : r2;
            const auto& other = trial % 2 ? r2 : r1;
            auto mixed = base;
            size_t words = n / 8;
            size_t from = rng() % words, to = from + 1 + rng() % (words - from);
            for (size_t w = 0; w < words; ++w) {
                bool take = trial % 4 < 2 ? (w >= from && w < to) : rng() % 2 == 0;
                if (take) {
                    std::memcpy(mixed.data() + value_at + w * 8, other.data() + value_at + w * 8, 8);
                }
            }
            EXPECT_EQ(check(mixed, key, &v) == record::check::ok, mixed == base) << "trial " << trial;
        }
    }
    // Two words of the value swapped, in different chains and in the same one.
    auto r = read_record(put_item(*s, key, a));
    record::view v;
    ASSERT_EQ(check(r, key, &v), record::check::ok);
    for (auto [i, j] : {std::pair{0, 1}, {0, 4}, {3, 7}, {10, 400}}) {
        auto bad = r;
        std::swap_ranges(bad.begin() + long(value_at + i * 8), bad.begin() + long(value_at + i * 8 + 8),
                         bad.begin() + long(value_at + j * 8));
        ASSERT_NE(bad, r);
        EXPECT_EQ(check(bad, key, &v), record::check::torn) << "words " << i << " and " << j << " swapped";
    }
}

TEST(kv_record, delete_overwrite_and_eviction_invalidate_a_cached_location) {
    auto s = make_store(4 << 20);
    item* a = put_item(*s, "a", "first");
    item* b = put_item(*s, "b", "second");
    record::view v;
    ASSERT_EQ(check(read_record(a), "a", &v), record::check::ok);
    // Overwrite: the old location reads as dead, the new one is valid with a higher version.
    uint64_t old_version = a->cas;
    item* a2 = put_item(*s, "a", "third");
    EXPECT_EQ(check(read_record(a), "a", &v), record::check::dead);
    auto a2_buf = read_record(a2);
    ASSERT_EQ(check(a2_buf, "a", &v), record::check::ok);
    EXPECT_GT(v.version, old_version);
    EXPECT_EQ(v.value, "third");
    // Delete.
    EXPECT_EQ(s->remove("b", hash_key("b")), store_result::stored);
    EXPECT_EQ(check(read_record(b), "b", &v), record::check::dead);
    // Eviction: fill 4 MB with other keys until "a" is gone; its location never validates as
    // another key, and never as "a" again unless "a" is stored there anew.
    for (int i = 0; s->peek("a", hash_key("a")); ++i) {
        put_item(*s, "fill" + std::to_string(i), "xxxxx");
        ASSERT_LT(i, 1'000'000);
    }
    EXPECT_NE(check(read_record(a2), "a", &v), record::check::ok);
}

TEST(kv_record, a_delayed_flush_invalidates_cached_locations_at_its_deadline) {
    auto s = make_store();
    item* a = put_item(*s, "a", "before");
    record::view v;
    s->flush_all(5); // memcached's rule: dead from now + 4 s (oldest_live = now + 5 - 1)
    s->set_time(t0 + 3);
    ASSERT_EQ(check(read_record(a), "a", &v), record::check::ok) << "before the deadline the value stands";
    EXPECT_EQ(s->stats().curr_items, 1u);
    s->set_time(t0 + 4);
    // No server-side GET touched "a": the tick alone must kill the record a client may READ.
    EXPECT_EQ(check(read_record(a), "a", &v), record::check::dead);
    EXPECT_EQ(s->stats().curr_items, 0u);
    EXPECT_EQ(s->quarantined(), 1u) << "the chunk waits for the grace period like any freed one";
    item* a2 = put_item(*s, "a", "after"); // stored in the deadline's second, after it: alive
    auto a2_buf = read_record(a2);         // v's views point into it
    ASSERT_EQ(check(a2_buf, "a", &v), record::check::ok);
    EXPECT_EQ(v.value, "after");
    s->set_time(t0 + 100);
    EXPECT_EQ(check(read_record(a2), "a", &v), record::check::ok) << "a flush runs once";
}

TEST(kv_record, touch_and_gat_seal_the_record_again_with_its_new_exptime) {
    auto s = make_store();
    item* a = put_item(*s, "a", "value");
    uint64_t version = a->cas;
    record::view v;
    ASSERT_TRUE(s->touch("a", hash_key("a"), 100));
    auto buf = read_record(a);
    ASSERT_EQ(check(buf, "a", &v), record::check::ok) << "a touched record reads as torn";
    EXPECT_EQ(v.exptime, t0 + 100);
    EXPECT_EQ(v.version, version) << "the value did not change: neither does its version";
    ASSERT_EQ(s->get_and_touch("a", hash_key("a"), 0), a); // gat: back to no expiry
    ASSERT_EQ(check(read_record(a), "a", &v), record::check::ok);
    EXPECT_EQ(v.exptime, 0u);
    // A READ that took the header before a touch and the trailer after it (or the reverse)
    // does not validate: the checksum covers the exptime.
    ASSERT_TRUE(s->touch("a", hash_key("a"), 500));
    auto after = read_record(a);
    std::memcpy(after.data(), buf.data(), sizeof(item)); // the header of the first touch
    EXPECT_EQ(check(after, "a", &v), record::check::torn);
}

TEST(kv_record, incr_never_changes_a_readable_value_in_place) {
    auto s = make_store();
    item* it = put_item(*s, "n", "100");
    auto before = read_record(it);
    uint64_t result = 0;
    ASSERT_EQ(s->add_delta("n", hash_key("n"), false, 1, &result), delta_result::ok);
    EXPECT_EQ(result, 99u);
    record::view v;
    EXPECT_EQ(check(read_record(it), "n", &v), record::check::dead) << "the old record was reused in place";
    item* now = s->peek("n", hash_key("n"));
    ASSERT_NE(now, it);
    auto now_buf = read_record(now);
    ASSERT_EQ(check(now_buf, "n", &v), record::check::ok);
    EXPECT_EQ(v.value, "99");
}

TEST(kv_record, a_freed_chunk_waits_for_the_grace_period) {
    store_config cfg;
    cfg.remote_readable = true;
    cfg.memory_limit = store::page_size_for(cfg); // one page: one slab class fills it
    store s(cfg, std::make_unique<heap_page_source>(store::page_size_for(cfg)), t0);
    auto key = [](int i) { return "f" + std::to_string(100000 + i); };
    int n = 0;
    while (s.stats().evictions == 0) {
        put_item(s, key(n++), "0123456789");
        ASSERT_LT(n, 100000);
    }
    // The page is full (that last put evicted an item and, memory being short, reused its
    // chunk at once). A deleted item's chunk, two epochs later, is the next one used.
    const uint64_t early = s.early_reuses();
    EXPECT_EQ(early, 1u);
    item* x = s.peek(key(n - 1), hash_key(key(n - 1)));
    ASSERT_EQ(s.remove(key(n - 1), hash_key(key(n - 1))), store_result::stored);
    EXPECT_EQ(s.quarantined(), 1u);
    s.advance_epoch();
    s.advance_epoch();
    uint64_t evictions = s.stats().evictions;
    item* y = put_item(s, "after-grace", "0123456789");
    EXPECT_EQ(y, x);
    EXPECT_EQ(s.stats().evictions, evictions) << "evicted although a ripe chunk was waiting";
    EXPECT_EQ(s.early_reuses(), early);
    // Within the grace period the freed chunk is not taken while anything else can be had: the
    // store evicts first, and only then, memory being short, reuses the oldest waiting chunk
    // early (counted).
    item* z = s.peek(key(n - 2), hash_key(key(n - 2)));
    ASSERT_EQ(s.remove(key(n - 2), hash_key(key(n - 2))), store_result::stored);
    item* w = put_item(s, "in-grace", "0123456789");
    EXPECT_EQ(s.stats().evictions, evictions + 1);
    EXPECT_EQ(w, z);
    EXPECT_EQ(s.early_reuses(), early + 1);
    EXPECT_EQ(s.quarantined(), 1u); // the evicted item's chunk waits now
    record::view v;
    EXPECT_EQ(check(read_record(w), std::string_view(key(n - 2)), &v), record::check::other_key);
}

TEST(kv_record, reserve_then_commit_links_the_written_value) {
    auto s = make_store();
    store_result why{};
    item* it = s->reserve("big", 9, 0, 5000, &why);
    ASSERT_NE(it, nullptr);
    EXPECT_EQ(s->peek("big", hash_key("big")), nullptr) << "visible before commit";
    std::memset(it->value_data(), 'w', 5000);
    uint64_t cas = 0;
    ASSERT_EQ(s->commit(store_mode::set, it, hash_key("big"), 0, &cas), store_result::stored);
    record::view v;
    auto big_buf = read_record(it);
    ASSERT_EQ(check(big_buf, "big", &v), record::check::ok);
    EXPECT_TRUE(v.value == std::string(5000, 'w'));
    EXPECT_EQ(v.version, cas);
    EXPECT_EQ(s->refs_held(), 0u);
    // add over an existing key: not stored, the reserved chunk goes back, the old value stays.
    item* again = s->reserve("big", 0, 0, 10, &why);
    ASSERT_NE(again, nullptr);
    std::memset(again->value_data(), 'z', 10);
    EXPECT_EQ(s->commit(store_mode::add, again, hash_key("big"), 0, nullptr), store_result::not_stored);
    EXPECT_TRUE(s->peek("big", hash_key("big"))->value() == std::string(5000, 'w'));
    // abandon: nothing linked, nothing held.
    item* gone = s->reserve("other", 0, 0, 100, &why);
    ASSERT_NE(gone, nullptr);
    s->abandon(gone);
    EXPECT_EQ(s->peek("other", hash_key("other")), nullptr);
    EXPECT_EQ(s->refs_held(), 0u);
    // too large
    EXPECT_EQ(s->reserve("huge", 0, 0, 2 << 20, &why), nullptr);
    EXPECT_EQ(why, store_result::too_large);
}

// The hash and the checksum load a key's or value's last (< 8) bytes with fixed-size loads
// (`load_tail`), not a libc copy of variable size. A record or a shard choice must not change
// with that: the same words as a zeroed word with `memcpy(&w, p, n)`, so builds before and after
// agree on every key's shard and every record's checksum. `same_bytes` is the key comparison of
// `record::validate`: equal exactly where the bytes are.
TEST(kv_record, tail_loads_and_byte_comparison_match_memcpy_and_memcmp) {
    const char bytes[] = "\x01\x82\x03\xf4\x05\x96\x07\xe8\x09\x7a";
    for (size_t n = 0; n < 8; ++n) {
        for (size_t at = 0; at + n <= sizeof(bytes) - 1; ++at) {
            uint64_t want = 0;
            std::memcpy(&want, bytes + at, n);
            EXPECT_EQ(hash_detail::load_tail(bytes + at, n), want) << n << " bytes at " << at;
        }
    }
    // A fold by the copy of variable size, as before: the same hash for every length to 40.
    auto fold_by_copy = [](uint64_t h, const char* p, size_t n) {
        for (; n >= 8; p += 8, n -= 8) {
            uint64_t w;
            std::memcpy(&w, p, 8);
            h = hash_detail::mix(h ^ w, hash_detail::m);
        }
        uint64_t tail = 0;
        std::memcpy(&tail, p, n);
        return hash_detail::mix(h ^ tail, hash_detail::m ^ n);
    };
    std::mt19937_64 rng(7);
    std::string s(40, '\0');
    for (char& c : s) {
        c = char(rng());
    }
    for (size_t n = 0; n <= s.size(); ++n) {
        EXPECT_EQ(hash_detail::fold(0x1234, s.data(), n), fold_by_copy(0x1234, s.data(), n)) << n;
        if (n + 8 <= s.size()) { // the tail as one load of the bytes before its end
            EXPECT_EQ(hash_detail::fold(0x1234, s.data() + 8, n, true), fold_by_copy(0x1234, s.data() + 8, n))
                << n;
        }
    }
    for (size_t n = 0; n <= 40; ++n) {
        std::string a = s.substr(0, n);
        EXPECT_TRUE(hash_detail::same_bytes(a.data(), s.data(), n)) << n;
        for (size_t i = 0; i < n; ++i) {
            std::string b = a;
            b[i] ^= 0x40;
            EXPECT_FALSE(hash_detail::same_bytes(a.data(), b.data(), n)) << n << " differ at " << i;
        }
    }
}

// Record format 2 and the shard hash, pinned: a server and a client of different builds agree on
// a record's checksum and a key's shard only while these values hold (computed by the format-2
// code before the tails were loaded in one piece).
TEST(kv_record, checksums_and_key_hashes_keep_their_values) {
    std::string v;
    for (int i = 0; i < 100; ++i) {
        v += char('a' + i % 26);
    }
    struct golden {
        const char* key;
        size_t value_len;
        uint64_t sum;
    };
    const golden sums[] = {
        {"key:00000042", 0, 0xe6e1a8ce7ab01cd3ull},        {"key:00000042", 5, 0xaccd89d377f3e8f1ull},
        {"key:00000042", 37, 0x99d516202bec3ebdull},       {"key:00000042", 100, 0x9a14cdc90a372f1bull},
        {"a-key-of-seventeen", 0, 0x9e9d63501539153dull},  {"a-key-of-seventeen", 5, 0xe1ae87a547f96862ull},
        {"a-key-of-seventeen", 37, 0xea28c95b0ffd56e2ull}, {"a-key-of-seventeen", 100, 0xf5f584aff6eea39cull},
    };
    for (const golden& g : sums) {
        EXPECT_EQ(record::checksum(7, 3, 1000, g.key, std::string_view(v).substr(0, g.value_len)), g.sum)
            << g.key << " " << g.value_len;
    }
    EXPECT_EQ(hash_key("k"), 0x97c4fa78797c4237ull);
    EXPECT_EQ(hash_key("key:0042"), 0xcac4bfcb08e1b480ull);
    EXPECT_EQ(hash_key("key:00000042"), 0x1702af3119b8cef1ull);
    EXPECT_EQ(hash_key("a-key-of-seventeen"), 0x3f50ff652f482006ull);
}
