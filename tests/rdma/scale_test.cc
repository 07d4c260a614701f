// Limits and scale (Soft-RoCE guest): the accept backlog and the per-shard connection cap
// reject with a reason the connecting side sees; one shard holds many idle connections of a
// small receive size class in bounded registered memory while others stream; a connection's
// receive window opens while its peer is busy and closes back to the idle window when it calms
// down, and a peer that bursts then goes quiet hands the credits above the idle window back.
#include "rdma_test_util.hh"

#include "core/timer.hh"

#include <cstdio>
#include <cstdlib>
#include <optional>

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
/// connections it accepts, at most `backlog` of them waiting, of receive size class
/// `recv_class` (0: the shard's default).
struct offering_listener {
    rdma::buffer mem;
    rdma::exported_region exported; // revoked before `mem` goes
    rdma::listener l;

    offering_listener(net::socket_address a, unsigned backlog, size_t recv_class = 0) {
        auto& ctx = rdma::shard_context::local();
        mem = ctx.pool().allocate(64);
        exported = rdma::export_region(mem, rdma::access::remote_write);
        rdma::listen_options lo;
        lo.connection = ctx.opts().connection;
        lo.connection->recv_buffer_size = recv_class;
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

/// What the receive side of shard 0 pins: receives promised to peers (all receive size
/// classes) and pool memory in use.
struct footprint {
    unsigned committed;
    uint64_t in_use_bytes;
    uint64_t registered_bytes;
    uint64_t cqs;
    uint64_t cq_entries;
};

footprint measure() {
    auto& ctx = rdma::shard_context::local();
    const auto st = ctx.stats();
    return {st.srq_committed, ctx.pool().stats().in_use_bytes, ctx.pool().stats().registered_bytes, st.cq.cqs,
            st.cq.entries};
}

/// The receive size class of the many idle connections (SHOAL_RDMA_IDLE_CLASS, 4 KiB).
size_t idle_class() {
    if (const char* v = std::getenv("SHOAL_RDMA_IDLE_CLASS")) {
        return size_t(std::strtoul(v, nullptr, 10));
    }
    return 4096;
}

/// The calling shard's receive size class of `size` bytes (all zero when it has none).
rdma::receive_class_stats class_stats(size_t size) {
    const auto st = rdma::shard_context::local().stats();
    for (unsigned i = 0; i < st.srq_classes; ++i) {
        if (st.srq_class[i].buffer_size == size) {
            return st.srq_class[i];
        }
    }
    return {};
}

/// The options of a connection of receive size class `recv_class` on the calling shard.
rdma::connection_options of_class(size_t recv_class) {
    rdma::connection_options co = rdma::shard_context::local().opts().connection;
    co.recv_buffer_size = recv_class;
    return co;
}

/// Accepts one connection on `l` and reads `size` pattern bytes (`seed`) from it to the end of
/// its stream; returns the offset of the first bad byte or SIZE_MAX (`read_pattern`).
future<size_t> accept_and_read(rdma::listener& l, size_t size, unsigned seed, size_t peer_class) {
    rdma::connection c = co_await l.accept();
    EXPECT_EQ(c.peer_recv_buffer_size(), peer_class);
    net::connected_socket s = c.socket();
    net::input_stream in = s.input();
    size_t bad = co_await read_pattern(in, size, seed);
    net::temporary_buffer end = co_await in.read();
    EXPECT_TRUE(end.empty()) << "more than " << size << " bytes";
    co_return bad;
}

/// Connects to `a` with receive class `recv_class`, writes `size` pattern bytes (`seed`) and
/// closes; checks the class the peer advertised.
future<> connect_and_write(net::socket_address a, size_t recv_class, size_t size, unsigned seed,
                           size_t peer_class) {
    rdma::connection c = co_await rdma::connect_rc(a, of_class(recv_class));
    EXPECT_EQ(c.peer_recv_buffer_size(), peer_class);
    net::connected_socket s = c.socket();
    net::output_stream out = s.output();
    co_await write_pattern(out, size, seed, 256 << 10);
    co_await out.close();
}

} // namespace

TEST(scale, one_shard_holds_many_idle_connections_in_bounded_memory) {
    const unsigned n = idle_connection_count();
    const size_t small = idle_class();
    // The library's defaults (send queues of 128, 64 KiB default receive class, the default
    // receive window, CQ and SRQ sizes, the 256 MiB pool): only the device is chosen. The idle
    // connections take the 4 KiB receive class at both ends (4 receives × 4 KiB each; in the
    // 64 KiB class about 870 fit the default pool), while on the same shard a 64 KiB-class
    // connection streams 16 MiB and a 4 KiB-class one 1 MiB.
    rdma::options o;
    o.device.name = env().device;
    const unsigned per_conn = o.connection.idle_credits + o.connection.ctrl_credits;
    int rc = run_rdma(
        2,
        [n, per_conn, small]() -> future<> {
            const auto a = addr(next_port());
            auto& ctx = rdma::shard_context::local();
            const size_t big = ctx.opts().recv_buffer_size;
            const uint64_t base_held = buffers_held();
            const uint64_t base_in_use = ctx.pool().stats().in_use_bytes;
            const unsigned base_posted = ctx.srq().posted(); // the default class's slack
            std::optional<offering_listener> srv;
            srv.emplace(a, n, small);
            const unsigned classes = small == big ? 1 : 2;
            EXPECT_EQ(ctx.stats().srq_classes, classes) << "the listener made the small class";
            const footprint before = measure(); // the small class's slack posted
            auto start = std::chrono::steady_clock::now();
            co_await submit_to(1, [a, n, small] { return connect_many(a, n, 16, of_class(small)); });
            for (unsigned i = 0; i < n; ++i) {
                shard_connections.push_back(co_await srv->l.accept());
            }
            auto setup_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - start);
            EXPECT_EQ(ctx.stats().connections, n);
            EXPECT_EQ(shard_connections.front().peer_recv_buffer_size(), small);
            // Idle: each connection holds its idle window and control credits, nothing more,
            // all of them in the small class.
            RDMA_CHECK(
                co_await eventually([&] { return measure().committed == before.committed + n * per_conn; }));
            const footprint idle = measure();
            EXPECT_EQ(class_stats(small).committed, n * per_conn);
            if (small != big) {
                EXPECT_EQ(class_stats(big).committed, 0u) << "nothing promised in the 64 KiB class";
            }
            // Pool memory in use over the connections, the class's SRQ and slack included.
            const uint64_t per_conn_bytes = (idle.in_use_bytes - base_in_use) / n;
            EXPECT_LE(per_conn_bytes, per_conn * small + ctx.opts().srq_slack * small / n);
            if (small <= 4096) {
                EXPECT_LE(per_conn_bytes, 20u << 10) << "pinned pool memory per 4 KiB-class connection";
            }
            std::printf("%u idle %zu B-class connections on one shard (set up in %lld ms): %u receives "
                        "promised, %llu KiB of pool memory in use (%llu B per connection), %llu MiB "
                        "registered, %llu CQs of %llu entries in all\n",
                        n, small, (long long)setup_ms.count(), idle.committed - before.committed,
                        (unsigned long long)((idle.in_use_bytes - base_in_use) >> 10),
                        (unsigned long long)per_conn_bytes, (unsigned long long)(idle.registered_bytes >> 20),
                        (unsigned long long)idle.cqs, (unsigned long long)idle.cq_entries);

            // Streams on the same shard while they idle: 16 MiB in the 64 KiB class, 1 MiB in
            // the 4 KiB class, each written by shard 1 (same class) and checked here.
            const auto ab = addr(next_port());
            const auto as = addr(next_port());
            rdma::listener lb = rdma::listen_rc(ab);
            rdma::listen_options slo;
            slo.connection = of_class(small);
            rdma::listener ls = rdma::listen_rc(as, slo);
            auto read_big = accept_and_read(lb, 16 << 20, 5, big);
            auto read_small = accept_and_read(ls, 1 << 20, 6, small);
            future<> writers = submit_to(1, [ab, as, big, small] {
                std::vector<future<>> w;
                w.push_back(connect_and_write(ab, 0, 16 << 20, 5, big));
                w.push_back(connect_and_write(as, small, 1 << 20, 6, small));
                return when_all_succeed(std::move(w));
            });
            EXPECT_EQ(co_await std::move(read_big), SIZE_MAX) << "16 MiB in the 64 KiB class";
            EXPECT_EQ(co_await std::move(read_small), SIZE_MAX) << "1 MiB in the small class";
            co_await std::move(writers);
            EXPECT_EQ(ctx.stats().srq_classes, classes);

            // The idle ones work: a WRITE over each of the first few (each QP, each rkey check).
            co_await submit_to(1, []() -> future<> {
                rdma::buffer src = rdma::shard_context::local().pool().allocate(64);
                for (unsigned c = 0; c < 8 && c < shard_connections.size(); ++c) {
                    co_await shard_connections[c].write(rdma::span_of(src, 0, 8),
                                                        *shard_connections[c].peer_region(), 0);
                }
            });
            co_await submit_to(1, [] { shard_connections.clear(); });
            shard_connections.clear();
            srv->exported.revoke();
            srv.reset();
            lb = rdma::listener();
            ls = rdma::listener();
            EXPECT_TRUE(co_await all_connections_gone());
            // The 4 KiB class, unused, was freed with its receives; no buffer is held but the
            // default class's receives, of which those posted for the 64 KiB stream's window stay
            // posted (verbs cannot take a posted receive back; the next windows use them).
            RDMA_CHECK(co_await eventually([&] { return ctx.stats().srq_classes == 1; }));
            EXPECT_EQ(buffers_held(), base_held);
            EXPECT_EQ(ctx.srq().committed(), 0u);
            EXPECT_EQ(ctx.pool().stats().in_use_bytes - uint64_t(ctx.srq().posted()) * big,
                      base_in_use - uint64_t(base_posted) * big);
            if (small != big) {
                EXPECT_LE(ctx.srq().posted(),
                          base_posted + ctx.opts().connection.credits + ctx.opts().connection.ctrl_credits);
            }
            std::printf("after closing: pool in use %llu KiB (baseline %llu KiB), %u 64 KiB receives posted "
                        "(baseline %u)\n",
                        (unsigned long long)(ctx.pool().stats().in_use_bytes >> 10),
                        (unsigned long long)(base_in_use >> 10), ctx.srq().posted(), base_posted);
            co_await submit_to(1, [] {
                EXPECT_EQ(rdma::shard_context::local().stats().srq_classes, 1u) << "shard 1 freed its class";
            });
        },
        o);
    EXPECT_EQ(rc, 0);
}

TEST(scale, a_receive_window_opens_under_load_and_closes_back_when_calm) {
    rdma::options o = test_options();
    o.connection.give_back_after = 100ms; // the quiet sweep's period
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

            // Busy: 256 immediates issued at once; the window opens up to `credits`. The reader
            // stops for a moment after 32 so the sender runs out of credits whatever the
            // scheduling (a reader as fast as the sender may keep the peer from running low).
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
                if (i == 32) {
                    co_await sleep(20ms);
                }
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
            // Quiet: within a sweep period or two at most the idle window is promised (what calm
            // traffic left open closes, connection_impl::close_idle_window; the last immediate
            // read is consumed by the next read, so one credit may not be granted again yet).
            const bool closed = co_await eventually(
                [&] { return ctx.srq().committed() - base <= co.idle_credits + co.ctrl_credits; });
            const auto peer = co_await submit_to(1, [] { return shard_connections[0].stats(); });
            EXPECT_TRUE(closed) << "still " << ctx.srq().committed() - base
                                << " promised after quiet; withdrawn " << s.stats().credits_withdrawn
                                << ", taken back " << s.stats().credits_taken_back << ", the peer gave back "
                                << peer.credits_given_back << ", ctrl sent " << s.stats().ctrl_sent;
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

            // A burst opens the window and the peer goes quiet holding the credits of the reads.
            // Nothing is read until the whole burst has been sent: every time the sender runs out,
            // its last immediate finds it empty-handed, so the window doubles (2, 4, 8, 16) and the
            // burst fits in the largest window without a read. The reads then hand the window back
            // to a sender with nothing left to send. (An earlier version read along and relied on
            // the window staying open through the burst's tail; on a slower machine it closed
            // first in every round.)
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
            const unsigned unread = co.credits - co.idle_credits;
            RDMA_CHECK(unread > co.idle_credits); // the window must be able to open
            co_await burst(unread, 0);
            for (unsigned i = 0; i < unread; ++i) {
                EXPECT_EQ(co_await s.next_immediate(), i);
            }
            const unsigned after_reads = ctx.srq().committed() - base;
            EXPECT_GT(after_reads, idle) << "the window did not open";
            // Quiet: within a few periods the peer hands back what it holds above its idle window
            // and this side withdraws the promises it had not told yet (the control credit the
            // give-back used returns with the peer's next message).
            RDMA_CHECK(co_await eventually([&] { return ctx.srq().committed() - base <= idle; }));
            const uint64_t given =
                co_await submit_to(1, [] { return shard_connections[0].stats().credits_given_back; });
            std::printf("  %u promised after the reads, %lu given back, %lu withdrawn\n", after_reads,
                        static_cast<unsigned long>(given),
                        static_cast<unsigned long>(s.stats().credits_withdrawn));
            EXPECT_GT(given, 0u) << "the peer kept the credits of the reads";
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
