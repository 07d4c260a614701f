// Devices, the per-shard context, the registered memory pool (real verbs, Soft-RoCE guest).
#include "rdma_test_util.hh"

#include "core/future_util.hh"
#include "core/timer.hh"

#include <cerrno>
#include <cstring>

using namespace shoal;
using namespace shoal::rdma_test;

TEST(device, discovery_by_name_and_address_and_gid_choice) {
    auto d = rdma::device::open({.name = env().device});
    RecordProperty("device", d->describe());
    std::printf("device: %s\n", d->describe().c_str());
    EXPECT_EQ(d->gid_type(), "RoCEv2");
    EXPECT_EQ(d->ipv4_address(), env().ip);
    if (env().gid_index >= 0) {
        EXPECT_EQ(d->gid_index(), env().gid_index) << "auto-picked GID differs from the test bed's";
    }
    auto by_ip = rdma::device::open({.address = env().ip});
    EXPECT_EQ(by_ip->name(), d->name());
    EXPECT_EQ(by_ip->gid_index(), d->gid_index());
    EXPECT_EQ(by_ip->context(), d->context()) << "both must be librdmacm's context";

    auto over = rdma::device::open({.name = d->name(), .gid_index = 0});
    EXPECT_EQ(over->gid_index(), 0);

    try {
        rdma::device::open({.name = d->name(), .gid_index = 999});
        ADD_FAILURE() << "GID 999 accepted";
    } catch (const rdma::device_error& e) {
        EXPECT_NE(std::string(e.what()).find("999"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("valid GIDs"), std::string::npos) << e.what();
    }
    try {
        rdma::device::open({.name = "mlx5_77"});
        ADD_FAILURE() << "unknown device accepted";
    } catch (const rdma::device_error& e) {
        EXPECT_NE(std::string(e.what()).find("mlx5_77"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(d->name()), std::string::npos) << e.what();
    }
    EXPECT_THROW(rdma::device::open({.address = "127.0.0.1"}), rdma::device_error);
}

TEST(device, provider_capabilities) {
    auto d = rdma::device::open({.name = env().device});
    const auto& caps = d->capabilities();
    std::printf("thread domain: %s (%s), max inline %u, atomics %d, MW type 2: %d\n",
                caps.thread_domain ? "yes" : "no", std::strerror(caps.thread_domain_errno),
                caps.max_inline_data, caps.atomics, caps.memory_windows);
    EXPECT_GE(caps.max_inline_data, 64u);
    EXPECT_TRUE(caps.atomics);
    if (d->name().rfind("rxe", 0) == 0) {
        // rxe implements neither thread domains nor parent domains (rdma-core 44, kernel 6.1).
        EXPECT_FALSE(caps.thread_domain);
        EXPECT_EQ(caps.thread_domain_errno, EOPNOTSUPP);
    }
}

TEST(context, every_shard_has_its_own_resources) {
    int rc = run_rdma(2, []() -> future<> {
        auto& c0 = rdma::shard_context::local();
        struct info {
            ibv_pd* pd;
            ibv_cq* cq;
            ibv_srq* srq;
            rdma_event_channel* cm;
            unsigned shard;
        };
        info i1 = co_await submit_to(1, [] {
            auto& c = rdma::shard_context::local();
            return info{c.pd(), c.cq(), c.srq().srq(), c.cm_channel(), c.shard()};
        });
        EXPECT_EQ(c0.shard(), 0u);
        EXPECT_EQ(i1.shard, 1u);
        EXPECT_NE(c0.pd(), i1.pd);
        EXPECT_NE(c0.cq(), i1.cq);
        EXPECT_NE(c0.srq().srq(), i1.srq);
        EXPECT_NE(c0.cm_channel(), i1.cm);
        EXPECT_EQ(c0.thread_domain(), c0.dev().capabilities().thread_domain);
        EXPECT_EQ(c0.stats().connections, 0u);
        EXPECT_EQ(c0.srq().buffer_size(), test_options().recv_buffer_size);
    });
    EXPECT_EQ(rc, 0);
}

TEST(pool, size_classes_zero_copy_buffers_and_stats) {
    int rc = run_rdma(1, []() -> future<> {
        auto& pool = rdma::shard_context::local().pool();
        const auto base = pool.stats();
        const uint64_t regs = rdma::registration_count();
        EXPECT_GE(base.registered_bytes, size_t(4) << 20);
        EXPECT_GE(base.registrations, 1u);
        {
            rdma::buffer a = pool.allocate(100);
            EXPECT_EQ(a.capacity(), 256u);
            EXPECT_TRUE(pool.lkey_of(a.data(), 100));
            EXPECT_EQ(*pool.lkey_of(a.data(), 100), a.lkey());
            rdma::buffer b = pool.allocate(5000);
            EXPECT_EQ(b.capacity(), 8192u);
            EXPECT_EQ(pool.stats().in_use_buffers, base.in_use_buffers + 2);
            EXPECT_EQ(pool.stats().in_use_bytes, base.in_use_bytes + 256 + 8192);
            EXPECT_THROW((void)pool.allocate(pool.max_buffer_size() + 1), rdma::pool_exhausted);
            static char outside[16];
            EXPECT_FALSE(pool.lkey_of(outside, 1));
            // A temporary_buffer over pool memory: slices keep it; the last one returns it.
            std::memcpy(b.data(), "hello world", 11);
            net::temporary_buffer t = std::move(b).into_temporary_buffer(11);
            net::temporary_buffer slice = t.share(6, 5);
            t.reset();
            EXPECT_EQ(pool.stats().in_use_buffers, base.in_use_buffers + 2);
            EXPECT_EQ(slice.view(), "world");
            slice.reset();
            EXPECT_EQ(pool.stats().in_use_buffers, base.in_use_buffers + 1);
            // The descriptor is reused: its reference count starts over.
            rdma::buffer again = pool.allocate(5000);
            net::temporary_buffer t2 = std::move(again).into_temporary_buffer(1);
            t2.reset();
            EXPECT_EQ(pool.stats().in_use_buffers, base.in_use_buffers + 1);
        }
        EXPECT_EQ(pool.stats().in_use_buffers, base.in_use_buffers);
        EXPECT_GT(pool.stats().peak_in_use_bytes, base.in_use_bytes);
        EXPECT_EQ(rdma::registration_count(), regs) << "allocation must never register memory";
        co_return;
    });
    EXPECT_EQ(rc, 0);
}

TEST(pool, a_buffer_freed_on_another_shard_goes_home) {
    int rc = run_rdma(2, []() -> future<> {
        auto before = co_await submit_to(1, [] { return rdma::shard_context::local().pool().stats(); });
        rdma::buffer b =
            co_await submit_to(1, [] { return rdma::shard_context::local().pool().allocate(1000); });
        auto during = co_await submit_to(1, [] { return rdma::shard_context::local().pool().stats(); });
        EXPECT_EQ(during.in_use_buffers, before.in_use_buffers + 1);
        net::temporary_buffer t = std::move(b).into_temporary_buffer(10);
        t.reset(); // on shard 0: the buffer travels back to shard 1's pool
        auto after = co_await submit_to(1, [] { return rdma::shard_context::local().pool().stats(); });
        EXPECT_EQ(after.in_use_buffers, before.in_use_buffers);
        EXPECT_EQ(after.remote_frees, before.remote_frees + 1);
        EXPECT_EQ(rdma::shard_context::local().pool().stats().remote_frees, 0u);
    });
    EXPECT_EQ(rc, 0);
}

TEST(pool, slices_dropped_on_two_shards_at_once_are_counted_at_home) {
    // Shard 1's buffer, sliced there; shard 0 drops half the slices while shard 1 drops the
    // rest. Each drop on shard 0 is sent home (remote_frees counts them), so the buffer's
    // non-atomic count is only ever touched on shard 1 and the buffer goes back exactly once.
    int rc = run_rdma(2, []() -> future<> {
        constexpr unsigned n = 200;
        auto before = co_await submit_to(1, [] { return rdma::shard_context::local().pool().stats(); });
        static thread_local std::vector<net::temporary_buffer> kept;
        std::vector<net::temporary_buffer> away = co_await submit_to(1, [] {
            net::temporary_buffer t =
                rdma::shard_context::local().pool().allocate(64 << 10).into_temporary_buffer(64 << 10);
            std::vector<net::temporary_buffer> v;
            for (unsigned i = 0; i < n; ++i) {
                v.push_back(t.share(i * 8, 8));
                kept.push_back(t.share(i * 8, 8));
            }
            return v;
        });
        auto home_drops = submit_to(1, []() -> future<> {
            while (!kept.empty()) {
                kept.pop_back();
                co_await yield();
            }
            // Give the vector's own storage back too: a thread_local of a shard thread is not
            // reliably destroyed before LeakSanitizer looks.
            std::vector<net::temporary_buffer>().swap(kept);
        });
        while (!away.empty()) {
            away.pop_back();
            co_await yield();
        }
        co_await std::move(home_drops);
        bool back = co_await submit_to(1, [in_use = before.in_use_buffers] {
            return eventually(
                [in_use] { return rdma::shard_context::local().pool().stats().in_use_buffers == in_use; });
        });
        EXPECT_TRUE(back) << "the buffer did not go back to its pool";
        auto after = co_await submit_to(1, [] { return rdma::shard_context::local().pool().stats(); });
        EXPECT_EQ(after.remote_frees, before.remote_frees + n);
        EXPECT_EQ(after.in_use_bytes, before.in_use_bytes);
    });
    EXPECT_EQ(rc, 0);
}

TEST(pool, limit_and_high_watermark) {
    int rc = run_rdma(1, []() -> future<> {
        rdma::pool_options po;
        po.region_size = size_t(2) << 20;
        po.initial_bytes = size_t(2) << 20;
        po.max_bytes = size_t(4) << 20;
        po.max_buffer = size_t(1) << 20;
        po.high_watermark = 0.5;
        auto& ctx = rdma::shard_context::local();
        rdma::memory_pool p(ctx.pd(), po, 0);
        EXPECT_EQ(p.stats().regions, 1u);
        std::vector<rdma::buffer> held;
        for (int i = 0; i < 4; ++i) {
            held.push_back(p.allocate(size_t(1) << 20));
        }
        EXPECT_EQ(p.stats().regions, 2u) << "the pool grows by a region up to its limit";
        EXPECT_EQ(p.stats().registrations, 2u);
        EXPECT_TRUE(p.above_high_watermark());
        try {
            (void)p.allocate(1 << 20);
            ADD_FAILURE() << "allocation past the limit";
        } catch (const rdma::pool_exhausted& e) {
            EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
        }
        held.pop_back();
        held.pop_back();
        EXPECT_FALSE(p.try_allocate(4096, true)) << "optional allocations are refused at the watermark";
        EXPECT_TRUE(p.try_allocate(4096, false));
        EXPECT_GE(p.stats().failures, 2u);
        co_return;
    });
    EXPECT_EQ(rc, 0);
}
