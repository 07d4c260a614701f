// The registration cache (net/rdma/registration_cache.hh) on a real device (Soft-RoCE guest:
// ibv_reg_mr needs one): blocks reused without registering again, idle bytes kept under the
// bound by evicting the least recently used, held memory found again and kept alive while
// registered, and no key left working for memory the cache let go.
#include "rdma_test_util.hh"

#include "core/timer.hh"
#include "net/rdma/registration_cache.hh"

using namespace shoal;
using namespace shoal::rdma_test;

namespace {

/// READs `r` into fresh pool memory over `c`; returns the bytes.
future<std::string> read_back(rdma::connection& c, rdma::remote_region r) {
    rdma::buffer dst = rdma::shard_context::local().pool().allocate(r.length);
    co_await with_timeout(steady_clock_type::now() + patience, c.read(rdma::span_of(dst, 0, r.length), r, 0));
    co_return std::string(dst.data(), r.length);
}

} // namespace

TEST(registration_cache, blocks_are_reused_and_idle_bytes_stay_under_the_bound) {
    int rc = run_rdma(1, []() -> future<> {
        constexpr size_t k128 = size_t(128) << 10;
        rdma::registration_cache cache(2 * k128, rdma::access::remote_read);
        const uint64_t regs = rdma::registration_count();
        char* first;
        {
            net::temporary_buffer b = cache.allocate(100000); // class 128 KiB
            first = b.get_write();
            EXPECT_EQ(b.size(), 100000u);
            EXPECT_EQ(cache.stats().registrations, 1u);
            EXPECT_EQ(cache.stats().idle_bytes, 0u);
        }
        EXPECT_EQ(cache.stats().idle_bytes, k128) << "the dropped block stays registered";
        {
            net::temporary_buffer b = cache.allocate(k128);
            EXPECT_EQ(b.get(), first) << "the idle block of the class is taken again";
            EXPECT_EQ(cache.stats().registrations, 1u);
            EXPECT_EQ(cache.stats().hits, 1u);
            // A slice keeps the block in use after the buffer it came from is gone.
            net::temporary_buffer slice = b.share(10, 100);
            b.reset();
            EXPECT_EQ(cache.stats().idle_bytes, 0u);
            auto l = cache.find(slice.get(), slice.size());
            EXPECT_TRUE(l);
            slice.reset();
            EXPECT_EQ(cache.stats().idle_bytes, 0u) << "a lease keeps it in use";
        }
        EXPECT_EQ(cache.stats().idle_bytes, k128);
        // Another class is another registration.
        { net::temporary_buffer b = cache.allocate(k128 + 1); }
        EXPECT_EQ(cache.stats().registrations, 2u);
        EXPECT_EQ(cache.stats().idle_bytes, 2 * k128) << "a 256 KiB block and a 128 KiB one exceed the bound";
        EXPECT_EQ(cache.stats().evictions, 1u) << "the least recently used (the 128 KiB block) went";
        EXPECT_FALSE(cache.find(first, 1));

        // Four 128 KiB blocks in use at once, dropped in order: the two dropped last stay.
        std::vector<net::temporary_buffer> bs;
        std::vector<const char*> at;
        for (int i = 0; i < 4; ++i) {
            bs.push_back(cache.allocate(k128));
            at.push_back(bs.back().get());
        }
        EXPECT_EQ(cache.stats().registrations, 6u);
        for (auto& b : bs) {
            b.reset();
        }
        EXPECT_EQ(cache.stats().idle_bytes, 2 * k128);
        EXPECT_EQ(cache.stats().entries, 2u);
        EXPECT_FALSE(cache.find(at[0], 1)) << "evicted: its registration is not found";
        EXPECT_FALSE(cache.find(at[1], 1));
        EXPECT_TRUE(cache.find(at[2], 1));
        EXPECT_TRUE(cache.find(at[3], k128));
        EXPECT_FALSE(cache.find(at[3], k128 + 1)) << "a range past the block is not covered";
        EXPECT_EQ(rdma::registration_count() - regs, cache.stats().registrations);
        co_return;
    });
    EXPECT_EQ(rc, 0);
}

TEST(registration_cache, held_memory_is_found_again_and_no_key_outlives_its_registration) {
    int rc = run_rdma(1, []() -> future<> {
        constexpr size_t k256 = size_t(256) << 10;
        const auto a = addr(next_port());
        rdma::listener lis = rdma::listen_rc(a);
        auto accepted = lis.accept();
        rdma::connection c = co_await rdma::connect_rc(a);
        rdma::connection s = co_await std::move(accepted);

        rdma::registration_cache cache(size_t(1) << 20, rdma::access::remote_read);
        net::temporary_buffer user(k256);
        fill_pattern(user.get_write(), k256, 5);
        const char* user_at = user.get();
        rdma::remote_region r;
        {
            auto l1 = cache.hold(user);
            RDMA_CHECK(l1);
            r = l1.remote(user.get(), user.size());
            // The same memory again, or a part of it: found, not registered again.
            auto l2 = cache.hold(user.share(4096, 1000));
            RDMA_CHECK(l2);
            EXPECT_EQ(l2.remote(user.get() + 4096, 1000).rkey, r.rkey);
            EXPECT_EQ(cache.stats().registrations, 1u);
            EXPECT_EQ(cache.stats().hits, 1u);
            EXPECT_FALSE(cache.hold(net::temporary_buffer(size_t(2) << 20)))
                << "memory over the bound is not cached";
        }
        user.reset();
        EXPECT_EQ(cache.stats().idle_bytes, k256);
        // The user dropped the buffer; the cache still holds it, so the key reads the same bytes.
        std::string got = co_await read_back(c, r);
        EXPECT_EQ(check_pattern(got.data(), k256, 5), SIZE_MAX);

        // A 1 MiB buffer pushes the idle bytes over the bound: the older entry is evicted.
        net::temporary_buffer big(size_t(1) << 20);
        { auto lb = cache.hold(big); }
        EXPECT_EQ(cache.stats().evictions, 1u);
        EXPECT_EQ(cache.stats().entries, 1u);
        EXPECT_FALSE(cache.find(user_at, 1)) << "the evicted memory is not in the index";
        // Its key was revoked before the memory was let go: a READ with it fails (and breaks the
        // connection it ran on), it never returns whatever reuses that memory.
        bool failed = false;
        try {
            co_await read_back(s, r);
        } catch (...) {
            failed = true;
        }
        EXPECT_TRUE(failed) << "a READ with the evicted key succeeded";
        c.close();
        s.close();
    });
    EXPECT_EQ(rc, 0);
}

TEST(registration_cache, a_lease_keeps_an_entry_until_it_ends) {
    int rc = run_rdma(1, []() -> future<> {
        rdma::registration_cache cache(0, rdma::access::remote_read); // nothing idle is kept
        net::temporary_buffer user(size_t(64) << 10);
        {
            auto l = cache.hold(user); // bound 0: over the bound, so not cached
            EXPECT_FALSE(l);
        }
        rdma::registration_cache small(size_t(64) << 10, rdma::access::remote_read);
        auto l = small.hold(user);
        RDMA_CHECK(l);
        net::temporary_buffer other(size_t(64) << 10);
        { auto l2 = small.hold(other); }
        // `other` went idle and fits; `user` is leased and was not evicted for it.
        EXPECT_EQ(small.stats().entries, 2u);
        EXPECT_TRUE(small.find(user.get(), user.size()));
        l.reset();
        EXPECT_EQ(small.stats().entries, 1u) << "two idle entries exceed the bound: the older goes";
        EXPECT_FALSE(small.find(other.get(), 1)) << "the least recently used was `other`";
        // A block in use when its cache goes is freed when its last buffer is dropped.
        net::temporary_buffer survivor;
        {
            rdma::registration_cache gone(size_t(1) << 20, rdma::access::remote_read);
            survivor = gone.allocate(1000);
            std::memset(survivor.get_write(), 7, 1000);
        }
        EXPECT_EQ(survivor[999], 7);
        survivor.reset();
        co_return;
    });
    EXPECT_EQ(rc, 0);
}
