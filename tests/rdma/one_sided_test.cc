// One-sided operations (Soft-RoCE guest): READ/WRITE/atomics into exported regions, batching,
// WRITE then WRITE_WITH_IMM ordering, remote access errors breaking only their connection,
// revocation, and no registration while data flows.
#include "rdma_test_util.hh"

#include "core/timer.hh"

using namespace shoal;
using namespace shoal::rdma_test;

namespace {
constexpr auto all_access =
    rdma::access::remote_read | rdma::access::remote_write | rdma::access::remote_atomic;
}

TEST(one_sided, read_write_atomics_batching_and_imm_ordering) {
    int rc = run_rdma(2, []() -> future<> {
        const auto a = addr(next_port());
        auto& ctx = rdma::shard_context::local();
        rdma::buffer mem = ctx.pool().allocate(65536);
        std::memset(mem.data(), 0, 65536);
        rdma::exported_region exported = rdma::export_region(mem, all_access);
        rdma::listen_options lo;
        lo.connection = ctx.opts().connection;
        lo.connection->region = exported.descriptor();
        rdma::listener l = rdma::listen_rc(a, lo);
        auto accepted = l.accept();
        auto client = submit_to(1, [a]() -> future<> {
            rdma::connection c = co_await rdma::connect_rc(a);
            RDMA_CHECK(c.peer_region());
            const rdma::remote_region rr = *c.peer_region();
            EXPECT_EQ(rr.length, 65536u);
            auto& ctx = rdma::shard_context::local();
            rdma::buffer src = ctx.pool().allocate(8192);
            rdma::buffer dst = ctx.pool().allocate(8192);
            const uint64_t regs = rdma::registration_count();

            fill_pattern(src.data(), 8192, 3);
            co_await c.write(rdma::span_of(src, 0, 8192), rr, 4096);
            co_await c.read(rdma::span_of(dst, 0, 8192), rr, 4096);
            EXPECT_EQ(check_pattern(dst.data(), 8192, 3), SIZE_MAX);
            // A small write goes inline.
            co_await c.write(rdma::span_of(src, 100, 16), rr, 200);
            co_await c.read(rdma::span_of(dst, 0, 16), rr, 200);
            EXPECT_EQ(check_pattern(dst.data(), 16, 3, 100), SIZE_MAX);

            EXPECT_EQ(co_await c.fetch_add(rr, 0, 5), 0u);
            EXPECT_EQ(co_await c.fetch_add(rr, 0, 7), 5u);
            EXPECT_EQ(co_await c.compare_swap(rr, 0, 12, 100), 12u);  // swapped
            EXPECT_EQ(co_await c.compare_swap(rr, 0, 12, 200), 100u); // not swapped
            EXPECT_EQ(co_await c.fetch_add(rr, 8, 1), 0u);

            // Several operations issued in one task go out as one list (one ibv_post_send).
            const uint64_t posts = ctx.stats().post_send_calls;
            std::vector<future<>> writes;
            for (int i = 0; i < 8; ++i) {
                writes.push_back(
                    c.write(rdma::span_of(src, size_t(i) * 512, 512), rr, 16384 + uint64_t(i) * 512));
            }
            EXPECT_EQ(ctx.stats().post_send_calls, posts) << "posted before the task ended";
            future<> all = when_all_succeed(std::move(writes));
            co_await std::move(all);
            EXPECT_EQ(ctx.stats().post_send_calls, posts + 1);
            co_await c.read(rdma::span_of(dst, 0, 4096), rr, 16384);
            EXPECT_EQ(check_pattern(dst.data(), 4096, 3), SIZE_MAX);

            // Local bounds are checked before posting; the connection stays usable.
            bool out_of_range = false;
            try {
                co_await c.read(rdma::span_of(dst, 0, 4096), rr, 65536 - 100);
            } catch (const std::out_of_range&) {
                out_of_range = true;
            }
            EXPECT_TRUE(out_of_range);
            EXPECT_TRUE(c.usable());

            // WRITE then WRITE_WITH_IMM: the peer sees the data when the immediate arrives.
            fill_pattern(src.data(), 8192, 9);
            auto w = c.write(rdma::span_of(src, 0, 8192), rr, 32768);
            auto wi = c.write_with_imm({}, rr, 0, 0xC0FFEE);
            co_await std::move(w);
            co_await std::move(wi);
            EXPECT_EQ(rdma::registration_count(), regs) << "data flowed through ibv_reg_mr";
            EXPECT_GT(c.stats().one_sided_ops, 15u);
        });
        rdma::connection s = co_await std::move(accepted);
        uint32_t imm = co_await s.next_immediate();
        EXPECT_EQ(imm, 0xC0FFEEu);
        EXPECT_EQ(check_pattern(mem.data() + 32768, 8192, 9), SIZE_MAX)
            << "immediate arrived before the data";
        uint64_t word0, word1;
        std::memcpy(&word0, mem.data(), 8);
        std::memcpy(&word1, mem.data() + 8, 8);
        EXPECT_EQ(word0, 100u);
        EXPECT_EQ(word1, 1u);
        co_await std::move(client);
        s = rdma::connection();
        exported.revoke();
        EXPECT_TRUE(co_await all_connections_gone());
    });
    EXPECT_EQ(rc, 0);
}

namespace {
struct exporter {
    rdma::buffer mem;
    rdma::exported_region exported;
    std::optional<rdma::listener> l;
    std::vector<rdma::connection> conns;
};
exporter server;

future<> serve(net::socket_address a) {
    auto& ctx = rdma::shard_context::local();
    server.mem = ctx.pool().allocate(4096);
    fill_pattern(server.mem.data(), 4096, 5);
    server.exported = rdma::export_region(server.mem, rdma::access::remote_read | rdma::access::remote_write);
    rdma::listen_options lo;
    lo.connection = ctx.opts().connection;
    lo.connection->region = server.exported.descriptor();
    server.l.emplace(rdma::listen_rc(a, lo));
    (void)keep_doing([] {
        return server.l->accept().then([](rdma::connection c) { server.conns.push_back(std::move(c)); });
    }).handle_exception([](std::exception_ptr) {});
    return make_ready_future<>();
}

/// After a test on `serve`'s server (client on shard 1): the server side of broken connections
/// is closed too, and once the server stops nothing is left behind on either shard.
future<> stop_serving() {
    co_await sleep(50ms);
    server.conns.clear();
    server.l.reset();
    server.exported.revoke();
    server.mem.reset();
    EXPECT_TRUE(co_await all_connections_gone());
    EXPECT_EQ(buffers_held(), 0u) << "server buffers leaked";
    uint64_t held1 = co_await submit_to(1, [] { return buffers_held(); });
    EXPECT_EQ(held1, 0u) << "client buffers leaked";
}
} // namespace

TEST(one_sided, access_outside_a_region_breaks_only_that_connection) {
    int rc = run_rdma(2, []() -> future<> {
        const auto a = addr(next_port());
        co_await serve(a);
        auto client = submit_to(1, [a]() -> future<> {
            auto& ctx = rdma::shard_context::local();
            rdma::connection conn_a = co_await rdma::connect_rc(a);
            rdma::connection conn_b = co_await rdma::connect_rc(a);
            rdma::connection conn_c = co_await rdma::connect_rc(a);
            const rdma::remote_region rr = *conn_a.peer_region();
            rdma::buffer dst = ctx.pool().allocate(8192);

            // A: a descriptor that claims more than the peer exported.
            rdma::remote_region bigger = rr;
            bigger.length = 1 << 20;
            future<> past_end = conn_a.read(rdma::span_of(dst, 0, 4096), bigger, 8192);
            std::string m = co_await remote_error_of(std::move(past_end));
            std::printf("  out of bounds: %s\n", m.c_str());
            EXPECT_NE(m.find("remote access error"), std::string::npos) << m;
            EXPECT_NE(m.find("READ"), std::string::npos) << m;
            EXPECT_FALSE(conn_a.usable());
            // Why the connection broke names the operation (it used to say "RDMA ?").
            std::string why = fmt::format("{}", conn_a.error());
            EXPECT_NE(why.find("RDMA READ of 4096 bytes"), std::string::npos) << why;
            bool closed = false;
            try {
                co_await conn_a.read(rdma::span_of(dst, 0, 16), rr, 0);
            } catch (const rdma::connection_closed& e) {
                closed = true;
                EXPECT_NE(std::string(e.what()).find("READ"), std::string::npos) << e.what();
            }
            EXPECT_TRUE(closed) << "a broken connection accepted more work";

            // B is unaffected.
            co_await conn_b.read(rdma::span_of(dst, 0, 4096), rr, 0);
            EXPECT_EQ(check_pattern(dst.data(), 4096, 5), SIZE_MAX);

            // C: a wrong rkey.
            rdma::remote_region wrong = rr;
            wrong.rkey ^= 0x5a5a00;
            future<> bad_key = conn_c.write(rdma::span_of(dst, 0, 64), wrong, 0);
            m = co_await remote_error_of(std::move(bad_key));
            std::printf("  wrong rkey: %s\n", m.c_str());
            EXPECT_NE(m.find("remote access error"), std::string::npos) << m;
            EXPECT_FALSE(conn_c.usable());
            co_await conn_b.read(rdma::span_of(dst, 0, 64), rr, 0);
            EXPECT_TRUE(conn_b.usable());

            // The server revokes the region: B's next access fails.
            co_await submit_to(0, [] { server.exported.revoke(); });
            future<> revoked = conn_b.read(rdma::span_of(dst, 0, 64), rr, 0);
            m = co_await remote_error_of(std::move(revoked));
            std::printf("  revoked: %s\n", m.c_str());
            EXPECT_NE(m.find("remote access error"), std::string::npos) << m;

            // The server keeps serving: a new connection reads a newly exported region.
            rdma::remote_region fresh = co_await submit_to(0, [] {
                server.exported = rdma::export_region(server.mem, rdma::access::remote_read);
                return server.exported.descriptor();
            });
            rdma::connection conn_d = co_await rdma::connect_rc(a);
            co_await conn_d.read(rdma::span_of(dst, 0, 4096), fresh, 0);
            EXPECT_EQ(check_pattern(dst.data(), 4096, 5), SIZE_MAX);
        });
        co_await std::move(client);
        co_await stop_serving();
    });
    EXPECT_EQ(rc, 0);
}

namespace {
/// An op_completion that records its calls; `action` runs inside the call (as a user's
/// completion would: issue more work, close the connection).
struct recorded_completion final : rdma::op_completion {
    int calls = 0;
    std::exception_ptr error;
    promise<> called;
    std::function<void(recorded_completion&)> action;

    void complete(std::exception_ptr e) noexcept override {
        if (++calls == 1) {
            error = std::move(e);
            if (action) {
                action(*this);
            }
            called.set_value();
        }
    }
    /// What the error says ("" when it succeeded), prefixed by its kind.
    std::string what() const {
        if (!error) {
            return "";
        }
        try {
            std::rethrow_exception(error);
        } catch (const rdma::remote_access_error& e) {
            return std::string("remote: ") + e.what();
        } catch (const rdma::connection_closed& e) {
            return std::string("closed: ") + e.what();
        } catch (const std::out_of_range& e) {
            return std::string("range: ") + e.what();
        } catch (const std::exception& e) {
            return std::string("other: ") + e.what();
        }
    }
};

/// WRITE_WITH_IMM needs one of the peer's receive credits; with none left it waits. A plain
/// WRITE called after it (which needs no credit) must not overtake it: the last write to a
/// location wins, in call order. The later WRITE returns a future, or (`with_completion`) is
/// issued with an op_completion, called once it completed.
future<> later_write_keeps_call_order(bool with_completion) {
    const auto a = addr(next_port());
    auto& ctx = rdma::shard_context::local();
    rdma::buffer mem = ctx.pool().allocate(4096);
    std::memset(mem.data(), 0, 4096);
    rdma::exported_region exported = rdma::export_region(mem, rdma::access::remote_write);
    rdma::listen_options lo;
    lo.connection = ctx.opts().connection;
    lo.connection->region = exported.descriptor();
    rdma::listener l = rdma::listen_rc(a, lo);
    auto accepted = l.accept();
    const unsigned credits = ctx.opts().connection.credits;
    auto client = submit_to(1, [a, credits, with_completion]() -> future<uint64_t> {
        rdma::connection c = co_await rdma::connect_rc(a);
        const rdma::remote_region rr = *c.peer_region();
        rdma::buffer src = rdma::shard_context::local().pool().allocate(4096);
        std::memset(src.data(), 'A', 2048);
        std::memset(src.data() + 2048, 'B', 2048);
        std::vector<future<>> ops;
        // Every credit, then one WRITE_WITH_IMM of 'A's that must wait for a credit...
        for (unsigned i = 0; i < credits; ++i) {
            ops.push_back(c.write_with_imm({}, rr, 0, i));
        }
        ops.push_back(c.write_with_imm(rdma::span_of(src, 0, 1024), rr, 0, 1000));
        // ...then a WRITE of 'B's to the same place.
        recorded_completion later;
        if (with_completion) {
            c.write(rdma::span_of(src, 2048, 1024), rr, 0, later);
            EXPECT_EQ(later.calls, 0) << "called before it could be issued";
        } else {
            ops.push_back(c.write(rdma::span_of(src, 2048, 1024), rr, 0));
        }
        future<> all = when_all_succeed(std::move(ops));
        co_await std::move(all);
        if (with_completion) {
            co_await later.called.get_future();
            EXPECT_EQ(later.calls, 1);
            EXPECT_EQ(later.what(), "");
        }
        co_return c.stats().credit_stalls;
    });
    rdma::connection s = co_await std::move(accepted);
    // Take the immediates (returning credits) only now: the waiting operations go out.
    for (unsigned i = 0; i <= credits; ++i) {
        uint32_t imm = co_await s.next_immediate();
        EXPECT_EQ(imm, i < credits ? i : 1000u);
    }
    (void)co_await std::move(client);
    // The client's WRITE completed: the data is in place.
    EXPECT_EQ(std::string(mem.data(), 1024), std::string(1024, 'B'))
        << "the later WRITE was overtaken by the WRITE_WITH_IMM that waited for a credit";
    s = rdma::connection();
    exported.revoke();
    EXPECT_TRUE(co_await all_connections_gone());
}
} // namespace

TEST(one_sided, operations_waiting_for_credits_keep_their_order) {
    EXPECT_EQ(run_rdma(2, [] { return later_write_keeps_call_order(false); }), 0);
}

TEST(one_sided, an_op_completion_behind_a_waiting_operation_keeps_call_order) {
    EXPECT_EQ(run_rdma(2, [] { return later_write_keeps_call_order(true); }), 0);
}

TEST(one_sided, an_op_completion_is_called_once_from_the_completion_or_at_once_on_error) {
    int rc = run_rdma(2, []() -> future<> {
        const auto a = addr(next_port());
        co_await serve(a);
        auto client = submit_to(1, [a]() -> future<> {
            auto& ctx = rdma::shard_context::local();
            rdma::connection c = co_await rdma::connect_rc(a);
            const rdma::remote_region rr = *c.peer_region();
            rdma::buffer src = ctx.pool().allocate(4096);
            rdma::buffer dst = ctx.pool().allocate(4096);

            // A READ: called once, from the completion (not before the task ends), data in place.
            recorded_completion r;
            c.read(rdma::span_of(dst, 0, 4096), rr, 0, r);
            EXPECT_EQ(r.calls, 0) << "called before the READ was even posted";
            co_await r.called.get_future();
            EXPECT_EQ(r.calls, 1);
            EXPECT_EQ(r.what(), "");
            EXPECT_EQ(check_pattern(dst.data(), 4096, 5), SIZE_MAX);

            // A WRITE whose completion issues a READ of what it wrote (work from inside the call).
            fill_pattern(src.data(), 512, 8);
            std::memset(dst.data(), 0, 4096);
            recorded_completion w, then_read;
            w.action = [&](recorded_completion&) { c.read(rdma::span_of(dst, 0, 512), rr, 1024, then_read); };
            c.write(rdma::span_of(src, 0, 512), rr, 1024, w);
            co_await then_read.called.get_future();
            EXPECT_EQ(w.calls, 1);
            EXPECT_EQ(w.what(), "");
            EXPECT_EQ(then_read.what(), "");
            EXPECT_EQ(check_pattern(dst.data(), 512, 8), SIZE_MAX);

            // Outside the remote region: called at once, the connection stays usable.
            recorded_completion outside;
            c.read(rdma::span_of(dst, 0, 4096), rr, 100, outside);
            EXPECT_EQ(outside.calls, 1);
            EXPECT_NE(outside.what().find("range: "), std::string::npos) << outside.what();
            EXPECT_TRUE(c.usable());

            // A remote access error: reported to the completion, which closes the connection
            // itself; the READ posted behind it is called once too (flushed, or done first).
            rdma::remote_region bigger = rr;
            bigger.length = 1 << 20;
            recorded_completion bad, behind;
            bad.action = [&](recorded_completion&) { c.close(); };
            c.read(rdma::span_of(dst, 0, 4096), bigger, 8192, bad);
            c.read(rdma::span_of(dst, 0, 16), rr, 0, behind);
            co_await bad.called.get_future();
            co_await behind.called.get_future();
            EXPECT_NE(bad.what().find("remote: "), std::string::npos) << bad.what();
            EXPECT_NE(bad.what().find("READ"), std::string::npos) << bad.what();
            EXPECT_EQ(bad.calls + behind.calls, 2);
            EXPECT_FALSE(c.usable());
            // The connection keeps the operation's error as its reason, not the plain closure.
            std::string why = fmt::format("{}", c.error());
            EXPECT_NE(why.find("RDMA READ of 4096 bytes"), std::string::npos) << why;

            // On the broken connection: called at once, with the reason it broke.
            recorded_completion late;
            c.write(rdma::span_of(src, 0, 16), rr, 0, late);
            EXPECT_EQ(late.calls, 1);
            EXPECT_NE(late.what().find("RDMA READ of 4096 bytes"), std::string::npos) << late.what();
        });
        co_await std::move(client);
        co_await stop_serving();
    });
    EXPECT_EQ(rc, 0);
}
