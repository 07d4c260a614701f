// Limits and scale (Soft-RoCE guest): the accept backlog and the per-shard connection cap
// reject with a reason the connecting side sees; one shard holds many idle connections in
// bounded registered memory; a connection's receive window opens while its peer is busy and
// closes back to the idle window when it calms down, and a peer that bursts then goes quiet
// hands the credits above the idle window back.
#include "rdma_test_util.hh"

#include "core/timer.hh"

#include <cstdio>
#include <cstdlib>

using namespace shoal;
using namespace shoal::rdma_test;

namespace {

/// The message of the exception `f` fails with ("" when it succeeds).
template <typename T>
future<std::string> error_of(future<T> f) {
    try {
        (void)co_await std::move(f);
    } catch (const std::exception& e) {
        co_return std::string(e.what());
    }
    co_return std::string();
}

thread_local std::vector<rdma::connection> shard_connections;

/// Connects `n` times to `a` from the calling shard, `parallel` at a time; keeps them.
future<> connect_many(net::socket_address a, unsigned n, unsigned parallel, rdma::connection_options o) {
    unsigned started = 0;
    while (started < n) {
        std::vector<future<rdma::connection>> batch;
        for (unsigned i = 0; i < parallel && started < n; ++i, ++started) {
            batch.push_back(rdma::connect_rc(a, o));
        }
        for (auto& f : batch) {
            shard_connections.push_back(co_await std::move(f));
        }
    }
}

/// A listener on the calling shard offering a small exported region (for WRITE_WITH_IMM) to the
/// connections it accepts, at most `backlog` of them waiting.
struct offering_listener {
    rdma::buffer mem;
    rdma::exported_region exported; // revoked before `mem` goes
    rdma::listener l;

    offering_listener(net::socket_address a, unsigned backlog) {
        auto& ctx = rdma::shard_context::local();
        mem = ctx.pool().allocate(64);
        exported = rdma::export_region(mem, rdma::access::remote_write);
        rdma::listen_options lo;
        lo.connection = ctx.opts().connection;
        lo.connection->region = exported.descriptor();
        lo.accept_backlog = backlog;
        l = rdma::listen_rc(a, lo);
    }
};

/// Connects once from shard 1 (which keeps the connection in `shard_connections`) to `srv` on
/// this shard and returns the accepted side.
future<rdma::connection> accept_one_from_shard_1(offering_listener& srv, net::socket_address a) {
    auto accepted = srv.l.accept();
    co_await submit_to(1,
                       [a] { return connect_many(a, 1, 1, rdma::shard_context::local().opts().connection); });
    co_return co_await std::move(accepted);
}

} // namespace

TEST(limits, a_full_accept_backlog_rejects_with_its_reason) {
    int rc = run_rdma(2, []() -> future<> {
        const auto a = addr(next_port());
        rdma::listen_options lo;
        lo.accept_backlog = 3;
        rdma::listener l = rdma::listen_rc(a, lo);
        // Nobody accepts: three connections wait in the backlog, the fourth is turned away.
        std::string err = co_await submit_to(1, [a]() -> future<std::string> {
            co_await connect_many(a, 3, 1, rdma::shard_context::local().opts().connection);
            co_return co_await error_of(rdma::connect_rc(a));
        });
        EXPECT_NE(err.find("accept backlog of 3 full on shard 0"), std::string::npos) << err;
        // Taking one makes room for one.
        rdma::connection first = co_await l.accept();
        EXPECT_TRUE(first.usable());
        std::string second = co_await submit_to(1, [a] { return error_of(rdma::connect_rc(a)); });
        EXPECT_EQ(second, "");
        first = rdma::connection();
        co_await submit_to(1, [] { shard_connections.clear(); });
    });
    EXPECT_EQ(rc, 0);
}

TEST(limits, the_per_shard_connection_cap_rejects_with_its_reason) {
    rdma::options o = test_options();
    o.max_connections = 3;
    int rc = run_rdma(
        3,
        []() -> future<> {
            const auto a = addr(next_port());
            rdma::listener l = rdma::listen_rc(a); // accepted connections stay in its backlog
            // Shard 1 fills shard 0 (and itself) up to the cap.
            co_await submit_to(
                1, [a] { return connect_many(a, 3, 1, rdma::shard_context::local().opts().connection); });
            EXPECT_EQ(rdma::shard_context::local().stats().connections, 3u);
            // Shard 2 has room, shard 0 has not: rejected by the peer, with the reason.
            std::string remote = co_await submit_to(2, [a] { return error_of(rdma::connect_rc(a)); });
            EXPECT_NE(remote.find("rejected by the peer: connection limit of 3 reached on shard 0"),
                      std::string::npos)
                << remote;
            // Shard 1 itself is full: refused locally.
            std::string local = co_await submit_to(1, [a] { return error_of(rdma::connect_rc(a)); });
            EXPECT_NE(local.find("connection limit of 3 reached on shard 1"), std::string::npos) << local;
            co_await submit_to(1, [] { shard_connections.clear(); });
            l.abort_accept();
            EXPECT_TRUE(co_await all_connections_gone());
        },
        o);
    EXPECT_EQ(rc, 0);
}

namespace {

unsigned idle_connection_count() {
    if (const char* v = std::getenv("SHOAL_RDMA_IDLE_CONNECTIONS")) {
        return unsigned(std::strtoul(v, nullptr, 10));
    }
    return 1000;
}

/// What the receive side of shard 0 pins: receives promised to peers and pool memory in use.
struct footprint {
    unsigned committed;
    uint64_t in_use_bytes;
    uint64_t registered_bytes;
    uint64_t cqs;
    uint64_t cq_entries;
};

footprint measure() {
    auto& ctx = rdma::shard_context::local();
    const auto cq = ctx.stats().cq;
    return {ctx.srq().committed(), ctx.pool().stats().in_use_bytes, ctx.pool().stats().registered_bytes,
            cq.cqs, cq.entries};
}

} // namespace

TEST(scale, one_shard_holds_many_idle_connections_in_bounded_memory) {
    const unsigned n = idle_connection_count();
    // The library's defaults (send queues of 128, 64 KiB receive buffers, the default receive
    // window, CQ and SRQ sizes): only the device is chosen, and the pool's budget is raised from
    // 256 MiB to what 1,000 idle windows pin (4 receives × 64 KiB each, 250 MiB, over the
    // default pool's 85 % watermark: about 870 fit; the watermark test covers refusals).
    rdma::options o;
    o.device.name = env().device;
    o.pool.max_bytes = size_t(320) << 20;
    const unsigned per_conn = o.connection.idle_credits + o.connection.ctrl_credits;
    int rc = run_rdma(
        2,
        [n, per_conn]() -> future<> {
            const auto a = addr(next_port());
            auto& ctx = rdma::shard_context::local();
            offering_listener srv(a, n);
            rdma::listener& l = srv.l;
            const footprint before = measure();
            auto start = std::chrono::steady_clock::now();
            co_await submit_to(
                1, [a, n] { return connect_many(a, n, 16, rdma::shard_context::local().opts().connection); });
            for (unsigned i = 0; i < n; ++i) {
                shard_connections.push_back(co_await l.accept());
            }
            auto setup_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - start);
            EXPECT_EQ(ctx.stats().connections, n);
            // Idle: each connection holds its idle window and control credits, nothing more.
            RDMA_CHECK(
                co_await eventually([&] { return measure().committed == before.committed + n * per_conn; }));
            const footprint idle = measure();
            const size_t rb = ctx.srq().buffer_size();
            const uint64_t bound = uint64_t(n * per_conn + ctx.srq().slack()) * rb;
            EXPECT_LE(idle.in_use_bytes - before.in_use_bytes, bound);
            std::printf("%u idle connections on one shard (set up in %lld ms): %u receives promised, "
                        "%llu KiB of pool memory in use (%llu B per connection), %llu MiB registered, "
                        "%llu CQs of %llu entries in all\n",
                        n, (long long)setup_ms.count(), idle.committed - before.committed,
                        (unsigned long long)((idle.in_use_bytes - before.in_use_bytes) >> 10),
                        (unsigned long long)((idle.in_use_bytes - before.in_use_bytes) / n),
                        (unsigned long long)(idle.registered_bytes >> 20), (unsigned long long)idle.cqs,
                        (unsigned long long)idle.cq_entries);

            // They work: a WRITE over each of the first few (each QP, each rkey check).
            co_await submit_to(1, []() -> future<> {
                rdma::buffer src = rdma::shard_context::local().pool().allocate(64);
                for (unsigned c = 0; c < 8 && c < shard_connections.size(); ++c) {
                    co_await shard_connections[c].write(rdma::span_of(src, 0, 8),
                                                        *shard_connections[c].peer_region(), 0);
                }
            });
            co_await submit_to(1, [] { shard_connections.clear(); });
            shard_connections.clear();
            srv.exported.revoke();
            EXPECT_TRUE(co_await all_connections_gone(30s));
        },
        o);
    EXPECT_EQ(rc, 0);
}

TEST(scale, a_receive_window_opens_under_load_and_closes_back_when_calm) {
    rdma::options o = test_options();
    int rc = run_rdma(
        2,
        []() -> future<> {
            const auto a = addr(next_port());
            auto& ctx = rdma::shard_context::local();
            offering_listener srv(a, 256);
            const unsigned base = ctx.srq().committed();
            const auto& co = ctx.opts().connection;
            rdma::connection s = co_await accept_one_from_shard_1(srv, a);
            RDMA_CHECK(co_await eventually(
                [&] { return ctx.srq().committed() == base + co.idle_credits + co.ctrl_credits; }));

            // Busy: 256 immediates issued at once; the window opens up to `credits`.
            constexpr unsigned burst = 256, calm = 3 * 16;
            auto sender = submit_to(1, []() -> future<> {
                auto& c = shard_connections[0];
                std::vector<future<>> ops;
                for (unsigned i = 0; i < burst; ++i) {
                    ops.push_back(c.write_with_imm({}, *c.peer_region(), 0, i));
                }
                co_await when_all_succeed(std::move(ops));
            });
            unsigned peak = 0;
            for (unsigned i = 0; i < burst; ++i) {
                EXPECT_EQ(co_await s.next_immediate(), i);
                peak = std::max(peak, ctx.srq().committed() - base);
            }
            co_await std::move(sender);
            EXPECT_GT(peak, co.idle_credits + co.ctrl_credits) << "the window never opened";
            EXPECT_LE(peak, co.credits + co.ctrl_credits) << "more than the largest window was promised";

            // Calm: one message at a time; the window closes back to the idle window.
            for (unsigned i = 0; i < calm; ++i) {
                auto one = submit_to(1, [i] {
                    auto& c = shard_connections[0];
                    return c.write_with_imm({}, *c.peer_region(), 0, i);
                });
                EXPECT_EQ(co_await s.next_immediate(), i);
                co_await std::move(one);
                if (std::getenv("SHOAL_TEST_TRACE_WINDOW")) {
                    std::printf("calm %u: %u promised\n", i, ctx.srq().committed() - base);
                }
            }
            // Back to the idle window, give or take one doubling: one-way traffic whose credits
            // return on messages of their own looks busy now and then (see docs/rdma.md, "Limits").
            const unsigned after = ctx.srq().committed() - base;
            EXPECT_LE(after, 2 * co.idle_credits + co.ctrl_credits) << "the window did not close";
            EXPECT_LT(after, peak);
            co_await submit_to(1, [] { shard_connections.clear(); });
            s = rdma::connection();
            srv.exported.revoke();
            EXPECT_TRUE(co_await all_connections_gone());
        },
        o);
    EXPECT_EQ(rc, 0);
}

TEST(scale, a_peer_that_bursts_then_goes_quiet_gives_its_credits_back) {
    rdma::options o = test_options();
    o.connection.give_back_after = 100ms;
    int rc = run_rdma(
        2,
        []() -> future<> {
            const auto a = addr(next_port());
            auto& ctx = rdma::shard_context::local();
            offering_listener srv(a, 256);
            const unsigned base = ctx.srq().committed();
            const auto& co = ctx.opts().connection;
            const unsigned idle = co.idle_credits + co.ctrl_credits;
            rdma::connection s = co_await accept_one_from_shard_1(srv, a);
            RDMA_CHECK(co_await eventually([&] { return ctx.srq().committed() == base + idle; }));

            // A burst of 256 immediates opens the window; all read, the peer holds the credits
            // that came back and goes quiet.
            auto burst = [](unsigned n, unsigned first) {
                return submit_to(1, [n, first]() -> future<> {
                    auto& c = shard_connections[0];
                    std::vector<future<>> ops;
                    for (unsigned i = 0; i < n; ++i) {
                        ops.push_back(c.write_with_imm({}, *c.peer_region(), 0, first + i));
                    }
                    co_await when_all_succeed(std::move(ops));
                });
            };
            // Each round: a burst opens the window, then quiet. The outcome asserted every round is
            // that the promised receives come back to the idle window. Whether a round exercises
            // the give-back depends on timing (the window may close on its own during the burst's
            // tail, then there is nothing to give back), so rounds repeat until one gives back.
            uint64_t given = 0;
            unsigned first = 0;
            for (unsigned round = 0; round < 5 && given == 0; ++round, first += 256) {
                auto sender = burst(256, first);
                for (unsigned i = 0; i < 256; ++i) {
                    EXPECT_EQ(co_await s.next_immediate(), first + i);
                }
                co_await std::move(sender);
                const unsigned after_burst = ctx.srq().committed() - base;
                // Quiet: within a few periods the peer hands back what it holds above the idle
                // window and this side withdraws those promises (the control credit the
                // give-back used returns with the peer's next message).
                RDMA_CHECK(co_await eventually([&] { return ctx.srq().committed() - base <= idle; }, 5000ms));
                given = co_await submit_to(1, [] { return shard_connections[0].stats().credits_given_back; });
                std::printf("  round %u: %u promised after the burst, %lu given back\n", round, after_burst,
                            static_cast<unsigned long>(given));
            }
            EXPECT_GT(given, 0u) << "no round gave credits back";
            RDMA_CHECK(co_await eventually([&] { return s.stats().credits_taken_back == given; }));
            EXPECT_GE(ctx.srq().committed() - base, co.idle_credits) << "the idle window is kept";

            // The receives it gave back serve the next connection: nothing new is posted for it.
            // (A small give-back may leave fewer spare receives than a new window needs: then only
            // the difference is posted.)
            const unsigned posted = ctx.srq().posted();
            const long spare = long(posted) - long(ctx.srq().committed()) - long(ctx.srq().slack());
            rdma::connection s2 = co_await accept_one_from_shard_1(srv, a);
            EXPECT_LE(long(ctx.srq().posted()), long(posted) + std::max(0L, long(idle) - spare));

            // The quiet connection still works, its window opening again under a new burst.
            auto again = burst(64, 100000);
            for (unsigned i = 0; i < 64; ++i) {
                EXPECT_EQ(co_await s.next_immediate(), 100000 + i);
            }
            co_await std::move(again);
            co_await submit_to(1, [] { shard_connections.clear(); });
            s = rdma::connection();
            s2 = rdma::connection();
            srv.exported.revoke();
            EXPECT_TRUE(co_await all_connections_gone());
        },
        o);
    EXPECT_EQ(rc, 0);
}
