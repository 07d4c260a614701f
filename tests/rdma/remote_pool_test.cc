// The remote memory pool and the peer (Soft-RoCE guest): leases written and read back over the
// one-sided group while the control connection carries only messages, release revoking a
// region, quota / watermark / bad-request refusals that leave the client usable, and every
// region of a client reclaimed when it disconnects or its process is killed.
#include "net/rdma/services/peer.hh"
#include "net/rdma/services/remote_pool.hh"
#include "rdma_test_util.hh"

#include <csignal>
#include <sys/wait.h>

using namespace shoal;
using namespace shoal::rdma_test;

namespace {

/// A pool server on this shard accepting every connection on `a`.
struct pool_service {
    rdma::listener l;
    rdma::remote_pool_server srv;
    std::vector<future<>> served;
    future<> loop = make_ready_future<>();

    pool_service(net::socket_address a, rdma::remote_pool_options o)
        : l(rdma::listen_rc(a))
        , srv(o) {
        loop = accept_all();
    }
    future<> accept_all() {
        try {
            for (;;) {
                rdma::connection c = co_await l.accept();
                served.push_back(srv.serve(std::move(c)));
            }
        } catch (...) {
        }
    }
    /// Stops accepting, shuts the server (closing its connections) and waits for the loops.
    future<> stop() {
        l.abort_accept();
        co_await std::move(loop);
        srv = rdma::remote_pool_server();
        co_await when_all(std::move(served));
    }
    const rdma::remote_pool_stats& stats() const { return srv.stats(); }
};

/// The stats of a server holding nothing: no clients, regions, bytes or data connections.
bool at_baseline(const rdma::remote_pool_stats& s) {
    return s.clients == 0 && s.regions == 0 && s.leased_bytes == 0 && s.data_connections == 0;
}

/// The message of the remote_pool_error `f` fails with, and its reason (0 when it succeeds or
/// fails otherwise).
template <typename T>
future<std::pair<unsigned, std::string>> refusal_of(future<T> f) {
    try {
        co_await std::move(f);
    } catch (const rdma::remote_pool_error& e) {
        co_return std::pair<unsigned, std::string>(unsigned(e.why()), e.what());
    } catch (const std::exception& e) {
        co_return std::pair<unsigned, std::string>(0, e.what());
    }
    co_return std::pair<unsigned, std::string>(0, "");
}

constexpr unsigned quota = unsigned(rdma::remote_pool_error::reason::quota);
constexpr unsigned watermark = unsigned(rdma::remote_pool_error::reason::watermark);
constexpr unsigned bad_request = unsigned(rdma::remote_pool_error::reason::bad_request);
constexpr unsigned unknown_lease = unsigned(rdma::remote_pool_error::reason::unknown_lease);

} // namespace

TEST(remote_pool, lease_write_read_release_on_the_one_sided_group) {
    int rc = run_rdma(2, []() -> future<> {
        const auto a = addr(next_port());
        pool_service ps(a, {});
        co_await submit_to(1, [a]() -> future<> {
            rdma::peer p = co_await rdma::peer::connect(a, 2);
            EXPECT_EQ(p.data_connections(), 2u);
            rdma::remote_pool_client pool(p);
            auto& bp = rdma::shard_context::local().pool();
            rdma::buffer src = bp.allocate(512 << 10);
            rdma::buffer dst = bp.allocate(512 << 10);

            constexpr size_t slice_size = 300 << 10; // three fit a 1 MiB lease
            // Slices of one 1 MiB lease, then a second lease when the first is used up.
            std::vector<rdma::remote_region> slices;
            for (size_t i = 0; i < 5; ++i) {
                slices.push_back(co_await pool.allocate(slice_size, 4096));
            }
            EXPECT_EQ(pool.leases().size(), 2u);
            EXPECT_EQ(pool.leased_bytes(), size_t(2) << 20);
            for (size_t i = 0; i < 3; ++i) {
                EXPECT_EQ(slices[i].rkey, pool.leases()[0].region.rkey);
                EXPECT_EQ(slices[i].addr % 4096, 0u);
                EXPECT_GE(slices[i].addr, pool.leases()[0].region.addr);
                EXPECT_LE(slices[i].addr + slices[i].length,
                          pool.leases()[0].region.addr + pool.leases()[0].region.length);
            }
            RDMA_CHECK(pool.leases().size() == 2);
            EXPECT_EQ(slices[3].addr, pool.leases()[1].region.addr);
            EXPECT_EQ(slices[4].addr, pool.leases()[1].region.addr + slice_size);

            // Distinct patterns into every slice, then read back and checked.
            for (size_t i = 0; i < slices.size(); ++i) {
                fill_pattern(src.data(), slice_size, unsigned(20 + i));
                co_await pool.remote_write(rdma::span_of(src, 0, slice_size), slices[i]);
            }
            for (size_t i = 0; i < slices.size(); ++i) {
                std::memset(dst.data(), 0, slice_size);
                co_await pool.remote_read(rdma::span_of(dst, 0, slice_size), slices[i]);
                EXPECT_EQ(check_pattern(dst.data(), slice_size, unsigned(20 + i)), SIZE_MAX) << "slice " << i;
            }
            // The groups stay apart: no one-sided work on the control connection, only the
            // hello message on each one-sided connection, and both one-sided ones used.
            EXPECT_EQ(p.control().stats().one_sided_ops, 0u);
            for (unsigned i = 0; i < p.data_connections(); ++i) {
                EXPECT_EQ(p.one_sided(i).stats().messages_sent, 1u);
                EXPECT_GE(p.one_sided(i).stats().one_sided_ops, 5u) << "connection " << i;
            }

            // Released: the region's rkey stops working (the READ fails, breaking its
            // connection), the other lease still reads.
            const rdma::remote_lease gone = pool.leases()[1];
            co_await pool.release(gone);
            EXPECT_EQ(pool.leases().size(), 1u);
            std::string err;
            try {
                co_await p.one_sided(0).read(rdma::span_of(dst, 0, 4096), gone.region);
            } catch (const rdma::remote_access_error& e) {
                err = e.what();
            }
            EXPECT_FALSE(err.empty()) << "a released region was still readable";
            co_await p.one_sided(1).read(rdma::span_of(dst, 0, 4096), slices[0]);
            EXPECT_EQ(check_pattern(dst.data(), 4096, 20), SIZE_MAX);
            p.close();
        });
        bool back = co_await eventually([&] { return at_baseline(ps.stats()); });
        EXPECT_TRUE(back) << "regions " << ps.stats().regions << ", clients " << ps.stats().clients;
        EXPECT_EQ(ps.stats().leases, 2u);
        EXPECT_EQ(ps.stats().releases, 1u);
        EXPECT_EQ(ps.stats().reclaimed, 1u);
        co_await ps.stop();
        EXPECT_TRUE(co_await all_connections_gone());
    });
    EXPECT_EQ(rc, 0);
}

TEST(remote_pool, quota_watermark_and_bad_requests_refuse_clearly_and_keep_the_client) {
    int rc = run_rdma(2, []() -> future<> {
        const auto a = addr(next_port());
        rdma::remote_pool_options o;
        o.max_lease = 2 << 20;
        o.client_quota = 3 << 20;
        o.watermark = 4 << 20;
        pool_service ps(a, o);
        co_await submit_to(1, [a, ps = &ps]() -> future<> {
            rdma::peer pa = co_await rdma::peer::connect(a, 1);
            rdma::peer pb = co_await rdma::peer::connect(a, 1);
            rdma::remote_pool_client ca(pa);
            rdma::remote_pool_client cb(pb);
            for (int i = 0; i < 3; ++i) {
                co_await ca.lease(1 << 20);
            }
            auto [r1, t1] = co_await refusal_of(ca.lease(1 << 20));
            EXPECT_EQ(r1, quota) << t1;
            EXPECT_NE(t1.find("client quota of 3145728 bytes: holds 3145728, asked for 1048576 more"),
                      std::string::npos)
                << t1;
            // B fits under the watermark once, then not.
            co_await cb.lease(1 << 20);
            auto [r2, t2] = co_await refusal_of(cb.lease(1 << 20));
            EXPECT_EQ(r2, watermark) << t2;
            EXPECT_NE(t2.find("server watermark of 4194304 bytes: 4194304 leased"), std::string::npos) << t2;
            auto [r3, t3] = co_await refusal_of(ca.lease(0));
            EXPECT_EQ(r3, bad_request) << t3;
            auto [r4, t4] = co_await refusal_of(cb.lease(3 << 20));
            EXPECT_EQ(r4, bad_request) << t4;
            EXPECT_NE(t4.find("1 to 2097152 bytes per lease"), std::string::npos) << t4;
            auto [r5, t5] = co_await refusal_of(cb.release(rdma::remote_lease{{}, 999999}));
            EXPECT_EQ(r5, unknown_lease) << t5;
            // Nothing was lost: both still hold what they had, and A gets room after a release.
            EXPECT_EQ(ca.leased_bytes(), size_t(3) << 20);
            EXPECT_EQ(cb.leased_bytes(), size_t(1) << 20);
            co_await ca.release(ca.leases()[0]);
            rdma::remote_lease l = co_await cb.lease(1 << 20);
            EXPECT_EQ(l.region.length, size_t(1) << 20);
            // A leaves: its two regions are reclaimed, B keeps its two.
            pa.close();
            bool reclaimed = false;
            for (auto until = std::chrono::steady_clock::now() + patience;
                 !reclaimed && std::chrono::steady_clock::now() < until;) {
                reclaimed = co_await submit_to(0, [ps] { return ps->stats().clients == 1; });
                co_await sleep(5ms);
            }
            EXPECT_TRUE(reclaimed) << "client A still served long after it closed";
            EXPECT_EQ(cb.leases().size(), 2u);
            co_await cb.lease(1 << 20); // room again under the watermark
            pb.close();
        });
        bool back = co_await eventually([&] { return at_baseline(ps.stats()); });
        EXPECT_TRUE(back) << "regions " << ps.stats().regions << ", clients " << ps.stats().clients;
        const auto& s = ps.stats();
        EXPECT_EQ(s.quota_refusals, 1u);
        EXPECT_EQ(s.watermark_refusals, 1u);
        EXPECT_EQ(s.bad_requests, 2u);
        EXPECT_EQ(s.leases, 6u);
        EXPECT_EQ(s.releases, 1u);
        EXPECT_EQ(s.reclaimed, 5u);
        co_await ps.stop();
        EXPECT_TRUE(co_await all_connections_gone());
    });
    EXPECT_EQ(rc, 0);
}

TEST(remote_pool, killed_lease_holder_is_reclaimed) {
    int rc = run_rdma(1, []() -> future<> {
        const auto a = addr(next_port());
        pool_service ps(a, {});
        const auto baseline = ps.stats();
        EXPECT_TRUE(at_baseline(baseline));
        pid_t pid = spawn_peer("holder", a.to_string());
        // The holder leases three regions and writes into them, then waits to be killed.
        bool holding =
            co_await eventually([&] { return ps.stats().regions == 3 && ps.stats().data_connections == 2; });
        EXPECT_TRUE(holding) << "regions " << ps.stats().regions;
        co_await sleep(100ms); // let its writes run
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        EXPECT_TRUE(WIFSIGNALED(status));
        bool back = co_await eventually([&] { return at_baseline(ps.stats()); });
        EXPECT_TRUE(back) << "regions " << ps.stats().regions << ", bytes " << ps.stats().leased_bytes
                          << ", clients " << ps.stats().clients << ", data connections "
                          << ps.stats().data_connections;
        EXPECT_EQ(ps.stats().reclaimed, 3u);
        // Still serving: a new client leases the memory the dead one held.
        rdma::peer p = co_await rdma::peer::connect(a, 1);
        rdma::remote_pool_client c(p);
        rdma::remote_lease l = co_await c.lease(3 << 20);
        EXPECT_EQ(ps.stats().leased_bytes, size_t(3) << 20);
        co_await c.release(l);
        p.close();
        co_await ps.stop();
        EXPECT_TRUE(co_await all_connections_gone());
    });
    EXPECT_EQ(rc, 0);
}

// --- the peer processes

namespace {

int peer_main(const std::string& mode, const std::string& address) {
    smp_options so;
    so.smp = 1;
    so.pin = false;
    return run_shards(so, [&]() -> future<int> {
        co_await rdma::start(test_options());
        auto a = net::socket_address::parse(address);
        if (mode == "holder") {
            static rdma::peer p = co_await rdma::peer::connect(a, 2);
            static rdma::remote_pool_client c(p);
            static rdma::buffer src = rdma::shard_context::local().pool().allocate(64 << 10);
            fill_pattern(src.data(), 64 << 10, 3);
            for (int i = 0; i < 3; ++i) {
                rdma::remote_lease l = co_await c.lease(1 << 20);
                co_await c.remote_write(rdma::span_of(src, 0, 64 << 10), l.region);
            }
            for (;;) { // until killed
                co_await sleep(1s);
            }
        }
        co_return 2;
    });
}

} // namespace

int main(int argc, char** argv) {
    return test_or_peer_main(argc, argv, peer_main);
}
