// Lifetimes of memory used by one-sided operations and exports (Soft-RoCE guest): a span keeps
// its pool buffer until the operation completes, an export keeps its buffer until revoked, and
// abort_source cancels one-sided operations, connect and accept at once without freeing memory
// the device may still use.
#include "rdma_test_util.hh"

#include "core/timer.hh"

#include <set>

using namespace shoal;
using namespace shoal::rdma_test;

namespace {

/// Pool buffers of `size` allocated now (same size class as the buffer under test), zeroed.
std::vector<rdma::buffer> grab(size_t size, int n) {
    std::vector<rdma::buffer> v;
    for (int i = 0; i < n; ++i) {
        v.push_back(rdma::shard_context::local().pool().allocate(size));
        std::memset(v.back().data(), 0, size);
    }
    return v;
}

/// Whether `f` fails with abort_requested_exception.
template <typename T>
future<bool> aborted(future<T> f) {
    try {
        (void)co_await std::move(f);
    } catch (const abort_requested_exception&) {
        co_return true;
    }
    co_return false;
}

bool any_at(const std::vector<rdma::buffer>& v, const char* p) {
    return std::any_of(v.begin(), v.end(), [p](const rdma::buffer& b) { return b.data() == p; });
}

bool all_zero(const std::vector<rdma::buffer>& v, size_t size) {
    return std::all_of(v.begin(), v.end(), [size](const rdma::buffer& b) {
        return std::all_of(b.data(), b.data() + size, [](char c) { return c == 0; });
    });
}

/// Listens on shard 0 with `region` offered to connecting peers.
rdma::listener listen_offering(net::socket_address a, const rdma::exported_region& region) {
    rdma::listen_options lo;
    lo.connection = rdma::shard_context::local().opts().connection;
    lo.connection->region = region.descriptor();
    return rdma::listen_rc(a, lo);
}

/// Waits until every operation issued on `c` before completed (a later READ completes after
/// them), through a small buffer of another size class than the ones under test.
future<> fence(rdma::connection& c, const rdma::remote_region& rr) {
    rdma::buffer b = rdma::shard_context::local().pool().allocate(64);
    co_await c.read(rdma::span_of(b, 0, 8), rr, 0);
}

constexpr size_t big = 256 << 10; // large enough that the guest takes a while to move it

} // namespace

/// A listener on shard 0 that offers `size` bytes of patterned pool memory (exported with
/// `acc`) and accepts one connection, while `client(a)` runs on shard 1.
future<> exported_server(size_t size, rdma::access acc, std::function<future<>(net::socket_address)> client) {
    const auto a = addr(next_port());
    auto& ctx = rdma::shard_context::local();
    rdma::buffer mem = ctx.pool().allocate(size);
    fill_pattern(mem.data(), size, 21);
    rdma::exported_region exported = rdma::export_region(mem, acc);
    rdma::listener l = listen_offering(a, exported);
    auto accepted = l.accept();
    auto done = submit_to(1, [a, &client] { return client(a); });
    rdma::connection s = co_await std::move(accepted);
    co_await std::move(done);
    s = rdma::connection();
    exported.revoke();
    EXPECT_TRUE(co_await all_connections_gone());
}

int with_exported_server(size_t size, rdma::access acc, std::function<future<>(net::socket_address)> client) {
    return run_rdma(2, [=] { return exported_server(size, acc, client); });
}

TEST(lifetimes, an_abandoned_read_keeps_its_buffer_until_the_completion) {
    int rc = with_exported_server(big, rdma::access::remote_read, [](net::socket_address a) -> future<> {
        rdma::connection c = co_await rdma::connect_rc(a);
        const rdma::remote_region rr = *c.peer_region();
        auto& pool = rdma::shard_context::local().pool();
        const uint64_t held0 = buffers_held();
        rdma::buffer dst = pool.allocate(big);
        std::memset(dst.data(), 0, big);
        char* const where = dst.data();
        // Abandoned by its deadline (whether the deadline or the READ wins the race, what
        // follows holds), and the last user handle on its buffer is dropped at once.
        future<> r = with_timeout(steady_clock_type::now() + 1us, c.read(rdma::span_of(dst, 0, big), rr, 0));
        dst.reset();
        EXPECT_EQ(buffers_held(), held0 + 1) << "the buffer of a pending READ went back to the pool";
        std::vector<rdma::buffer> others = grab(big, 4);
        EXPECT_FALSE(any_at(others, where)) << "the pool handed out the memory a pending READ writes";
        try {
            co_await std::move(r);
        } catch (const timed_out_error&) {
        }
        // Completions of one send queue come in order: once a later READ completed, the
        // abandoned one did, and its buffer went back to the pool.
        co_await fence(c, rr);
        EXPECT_TRUE(all_zero(others, big)) << "the READ wrote into memory handed out after it";
        // Freed last, handed out first (the pool's free lists are LIFO): it is the READ's buffer,
        // with what the READ brought.
        rdma::buffer again = pool.allocate(big);
        EXPECT_EQ(again.data(), where);
        EXPECT_EQ(check_pattern(again.data(), big, 21), SIZE_MAX);
    });
    EXPECT_EQ(rc, 0);
}

TEST(lifetimes, an_aborted_read_fails_at_once_and_keeps_its_buffer) {
    int rc = with_exported_server(big, rdma::access::remote_read, [](net::socket_address a) -> future<> {
        rdma::connection c = co_await rdma::connect_rc(a);
        const rdma::remote_region rr = *c.peer_region();
        auto& pool = rdma::shard_context::local().pool();
        const uint64_t held0 = buffers_held();
        rdma::buffer dst = pool.allocate(big);
        std::memset(dst.data(), 0, big);
        char* const where = dst.data();
        abort_source as;
        future<> r = c.read(rdma::span_of(dst, 0, big), rr, 0, as);
        dst.reset();
        EXPECT_FALSE(r.available());
        as.request_abort();
        EXPECT_TRUE(r.available()) << "an aborted READ did not fail at once";
        // Still in this task: the READ is not even posted yet.
        EXPECT_EQ(buffers_held(), held0 + 1) << "an aborted READ's buffer went back before its completion";
        std::vector<rdma::buffer> others = grab(big, 4);
        EXPECT_FALSE(any_at(others, where));
        EXPECT_TRUE(co_await aborted(std::move(r)));
        // It was already in the send queue: it still runs, then gives the buffer back.
        co_await fence(c, rr);
        EXPECT_TRUE(all_zero(others, big));
        rdma::buffer again = pool.allocate(big);
        EXPECT_EQ(again.data(), where);
        EXPECT_EQ(check_pattern(again.data(), big, 21), SIZE_MAX);
        // An operation on an already aborted source fails without being issued.
        const uint64_t ops = c.stats().one_sided_ops;
        EXPECT_TRUE(co_await aborted(c.read(rdma::span_of(again, 0, 64), rr, 0, as)));
        EXPECT_EQ(c.stats().one_sided_ops, ops);
        EXPECT_TRUE(c.usable());
    });
    EXPECT_EQ(rc, 0);
}

TEST(lifetimes, aborted_operations_still_queued_are_never_posted) {
    constexpr size_t piece = 4096;
    constexpr int n = 24;
    int rc = run_rdma(2, []() -> future<> {
        const auto a = addr(next_port());
        auto& ctx = rdma::shard_context::local();
        rdma::buffer mem = ctx.pool().allocate(piece * n);
        std::memset(mem.data(), 0, piece * n);
        rdma::exported_region exported = rdma::export_region(mem, rdma::access::remote_write);
        rdma::listener l = listen_offering(a, exported);
        auto accepted = l.accept();
        auto done = submit_to(1, [a]() -> future<> {
            rdma::connection_options o = rdma::shard_context::local().opts().connection;
            o.send_queue_depth = 8; // most of the writes below wait for their turn
            rdma::connection c = co_await rdma::connect_rc(a, o);
            const rdma::remote_region rr = *c.peer_region();
            rdma::buffer src = rdma::shard_context::local().pool().allocate(piece * n);
            fill_pattern(src.data(), piece * n, 4);
            abort_source keep, cut;
            std::vector<future<>> kept, cancelled;
            for (int i = 0; i < n; ++i) {
                auto span = rdma::span_of(src, size_t(i) * piece, piece);
                if (i < n / 2) {
                    kept.push_back(c.write(span, rr, uint64_t(i) * piece, keep));
                } else {
                    cancelled.push_back(c.write(span, rr, uint64_t(i) * piece, cut));
                }
            }
            cut.request_abort();
            int failed_at_once = 0;
            for (auto& f : cancelled) {
                if (f.available()) {
                    failed_at_once += f.failed();
                    f.ignore_ready_future();
                } else {
                    try {
                        co_await std::move(f);
                    } catch (...) {
                    }
                }
            }
            EXPECT_EQ(failed_at_once, n / 2);
            co_await when_all_succeed(std::move(kept));
            // Turns given up by the cancelled writes went to later operations: more of them
            // still go through, in order.
            std::vector<future<>> more;
            for (int i = 0; i < 16; ++i) {
                more.push_back(c.write(rdma::span_of(src, 0, 8), rr, 0));
            }
            co_await when_all_succeed(std::move(more));
            EXPECT_TRUE(c.usable());
        });
        rdma::connection s = co_await std::move(accepted);
        co_await std::move(done);
        for (int i = 0; i < n; ++i) {
            bool written =
                check_pattern(mem.data() + size_t(i) * piece, piece, 4, size_t(i) * piece) == SIZE_MAX;
            bool zero = std::all_of(mem.data() + size_t(i) * piece, mem.data() + size_t(i + 1) * piece,
                                    [](char ch) { return ch == 0; });
            if (i == 0) {
                continue; // the last writes rewrote its first 8 bytes
            }
            if (i < n / 2) {
                EXPECT_TRUE(written) << "kept write " << i << " did not land";
            } else {
                EXPECT_TRUE(zero) << "cancelled write " << i << " was posted";
            }
        }
        s = rdma::connection();
        exported.revoke();
        EXPECT_TRUE(co_await all_connections_gone());
    });
    EXPECT_EQ(rc, 0);
}

TEST(lifetimes, an_export_keeps_its_buffer_until_revoked) {
    constexpr size_t size = 4096;
    int rc = run_rdma(2, []() -> future<> {
        const auto a = addr(next_port());
        auto& pool = rdma::shard_context::local().pool();
        const uint64_t held0 = buffers_held();
        rdma::buffer e = pool.allocate(size);
        std::memset(e.data(), 0, size);
        char* const where = e.data();
        rdma::exported_region exported = rdma::export_region(e, rdma::access::remote_write);
        e.reset(); // the local handle goes; the export keeps the memory
        EXPECT_EQ(buffers_held(), held0 + 1) << "exported memory went back to the pool";
        std::vector<rdma::buffer> others = grab(size, 8);
        EXPECT_FALSE(any_at(others, where)) << "the pool handed out exported memory";
        rdma::listener l = listen_offering(a, exported);
        auto accepted = l.accept();
        auto done = submit_to(1, [a]() -> future<> {
            rdma::connection c = co_await rdma::connect_rc(a);
            rdma::buffer src = rdma::shard_context::local().pool().allocate(size);
            fill_pattern(src.data(), size, 8);
            co_await c.write(rdma::span_of(src, 0, size), *c.peer_region(), 0);
        });
        rdma::connection s = co_await std::move(accepted);
        co_await std::move(done);
        EXPECT_TRUE(all_zero(others, size)) << "the peer's write reached another buffer";
        exported.revoke();
        EXPECT_TRUE(co_await eventually([&] { return buffers_held() == held0 + others.size(); }))
            << "revoking did not give the memory back";
        rdma::buffer again = pool.allocate(size);
        EXPECT_EQ(again.data(), where);
        EXPECT_EQ(check_pattern(again.data(), size, 8), SIZE_MAX) << "the peer's write did not land";
        s = rdma::connection();
        EXPECT_TRUE(co_await all_connections_gone());
    });
    EXPECT_EQ(rc, 0);
}

TEST(lifetimes, connect_and_accept_honour_abort_source) {
    int rc = run_rdma(2, []() -> future<> {
        const auto a = addr(next_port());
        rdma::listener l = rdma::listen_rc(a);
        // A pending accept aborted fails at once; the listener keeps listening.
        {
            abort_source as;
            auto f = l.accept(as);
            EXPECT_FALSE(f.available());
            as.request_abort();
            // Nothing else happens on this listener: only the abort can end the accept.
            EXPECT_TRUE(co_await aborted(with_timeout(steady_clock_type::now() + patience, std::move(f))));
        }
        co_await submit_to(1, [a]() -> future<> {
            auto& ctx = rdma::shard_context::local();
            // Already aborted: fails without creating anything.
            abort_source before;
            before.request_abort();
            EXPECT_TRUE(co_await aborted(rdma::connect_rc(a, ctx.opts().connection, before)));
            // Aborted during setup: fails at once, and the half-made connection is freed.
            abort_source as;
            auto f = rdma::connect_rc(a, ctx.opts().connection, as);
            EXPECT_FALSE(f.available());
            as.request_abort();
            EXPECT_TRUE(co_await aborted(std::move(f))); // not aborted, it would succeed
            EXPECT_TRUE(co_await eventually([&] { return ctx.stats().connections == 0; }))
                << "an aborted connect left its connection behind";
        });
        // Both sides still work: a new accept gets a new connection.
        auto accepted = l.accept();
        auto client = submit_to(1, [a]() -> future<> {
            rdma::connection c = co_await rdma::connect_rc(a);
            EXPECT_TRUE(c.usable());
        });
        rdma::connection s = co_await std::move(accepted);
        co_await std::move(client);
        s = rdma::connection();
        EXPECT_TRUE(co_await all_connections_gone());
    });
    EXPECT_EQ(rc, 0);
}
