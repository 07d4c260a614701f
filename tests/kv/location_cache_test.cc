// The RDMA client's location cache (kv/client/internal/location_cache.hh) against
// std::unordered_map as the model: lookups, overwrites, deletions that shift entries back, eviction
// at the limit, clear.
#include "kv/client/internal/location_cache.hh"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>

using shoal::kv::internal::location_cache;
using shoal::kv::internal::record_location;

namespace {

record_location at(uint64_t addr, uint32_t len = 64) {
    return record_location{addr, uint32_t(addr * 7), len, unsigned(addr % 3)};
}

void expect_same(const record_location* got, const record_location& want, const std::string& key) {
    ASSERT_NE(got, nullptr) << key;
    EXPECT_EQ(got->addr, want.addr) << key;
    EXPECT_EQ(got->rkey, want.rkey) << key;
    EXPECT_EQ(got->len, want.len) << key;
    EXPECT_EQ(got->shard, want.shard) << key;
}

} // namespace

TEST(location_cache, finds_what_was_put_and_nothing_else) {
    location_cache c(100);
    EXPECT_EQ(c.find("a"), nullptr); // empty: no table yet
    c.put("key:1", at(1));
    c.put("key:2", at(2));
    expect_same(c.find("key:1"), at(1), "key:1");
    expect_same(c.find("key:2"), at(2), "key:2");
    EXPECT_EQ(c.find("key:3"), nullptr);
    EXPECT_EQ(c.find("key:"), nullptr);   // a prefix
    EXPECT_EQ(c.find("key:10"), nullptr); // a longer key
    c.put("key:1", at(9));                // overwrite
    expect_same(c.find("key:1"), at(9), "key:1");
    EXPECT_EQ(c.size(), 2u);
    const std::string long_key(250, 'k'); // memcached's longest key
    c.put(long_key, at(250));
    expect_same(c.find(long_key), at(250), long_key);
    c.erase("key:1");
    EXPECT_EQ(c.find("key:1"), nullptr);
    expect_same(c.find("key:2"), at(2), "key:2");
    c.erase("absent"); // nothing
    EXPECT_EQ(c.size(), 2u);
    c.clear();
    EXPECT_EQ(c.size(), 0u);
    EXPECT_EQ(c.find("key:2"), nullptr);
    EXPECT_EQ(c.find(long_key), nullptr);
    c.put("key:2", at(5)); // usable after clear
    expect_same(c.find("key:2"), at(5), "key:2");
}

TEST(location_cache, a_zero_limit_caches_nothing_and_empty_keys_are_never_cached) {
    location_cache none(0);
    none.put("k", at(1));
    EXPECT_EQ(none.size(), 0u);
    EXPECT_EQ(none.find("k"), nullptr);
    location_cache c(4);
    c.put("", at(1));
    EXPECT_EQ(c.size(), 0u);
    EXPECT_EQ(c.find(""), nullptr);
}

// Random puts, overwrites, erases and lookups over a key space small enough that the table is
// dense with collisions and runs of probes: after every step each key's entry is the model's.
TEST(location_cache, agrees_with_a_map_through_random_changes) {
    for (uint32_t seed : {1u, 2u, 3u}) {
        std::mt19937 rng(seed);
        location_cache c(1000); // never full here: every key stays
        std::unordered_map<std::string, record_location> model;
        for (int step = 0; step < 20000; ++step) {
            std::string key = "k" + std::to_string(rng() % 300);
            switch (rng() % 3) {
            case 0:
            case 1: {
                record_location l = at(rng() % 100000 + 1, rng() % 4096);
                c.put(key, l);
                model[key] = l;
                break;
            }
            default:
                c.erase(key);
                model.erase(key);
            }
            ASSERT_EQ(c.size(), model.size());
            if (step % 97 == 0) {
                for (unsigned k = 0; k < 300; ++k) {
                    std::string probe = "k" + std::to_string(k);
                    auto it = model.find(probe);
                    if (it == model.end()) {
                        ASSERT_EQ(c.find(probe), nullptr) << probe << " at step " << step;
                    } else {
                        ASSERT_NO_FATAL_FAILURE(expect_same(c.find(probe), it->second, probe));
                    }
                }
            }
        }
    }
}

// At the limit a new key evicts one other; whatever stays is still right, and a key already
// cached is overwritten without evicting anything.
TEST(location_cache, holds_at_most_its_limit_and_evicts_one_key_per_new_key) {
    constexpr size_t limit = 50;
    location_cache c(limit);
    std::unordered_map<std::string, record_location> put;
    for (unsigned k = 0; k < 1000; ++k) {
        std::string key = "key:" + std::to_string(k);
        size_t before = c.size();
        c.put(key, at(k + 1));
        put[key] = at(k + 1);
        EXPECT_EQ(c.size(), std::min<size_t>(before + 1, limit));
        expect_same(c.find(key), at(k + 1), key); // the newest is always kept
    }
    EXPECT_EQ(c.size(), limit);
    size_t found = 0;
    for (const auto& [key, loc] : put) {
        if (const record_location* l = c.find(key)) {
            expect_same(l, loc, key);
            ++found;
        }
    }
    EXPECT_EQ(found, limit);
    // Overwriting a cached key at the limit keeps every other entry.
    std::string kept;
    for (const auto& [key, loc] : put) {
        if (c.find(key)) {
            kept = key;
            break;
        }
    }
    c.put(kept, at(77777));
    expect_same(c.find(kept), at(77777), kept);
    size_t still = 0;
    for (const auto& [key, loc] : put) {
        still += c.find(key) != nullptr;
    }
    EXPECT_EQ(still, limit);
}
