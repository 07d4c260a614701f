// Memory windows of type 2 (Soft-RoCE guest): a window bound on one connection's QP works for
// that peer under a new rkey, the same rkey is refused on another connection, a local invalidate
// kills the rkey, a rebind uses a new one, and only invalidated windows go back to the shard's
// free list. Where the range is enforced: rxe checks a window's accesses against its MR, not
// against the window (see `rxe_enforces_the_mr_range_not_the_window_range`).
#include "rdma_test_util.hh"

#include <algorithm>

using namespace shoal;
using namespace shoal::rdma_test;

namespace {
/// The client side, on shard 1.
struct mw_client {
    std::vector<rdma::connection> conns;
    rdma::buffer buf;
};
mw_client* cl = nullptr;

/// Client `i` WRITEs `len` bytes of pattern `seed` at `offset` of `rr`; "" when it worked.
future<std::string> client_write(unsigned i, rdma::remote_region rr, uint64_t offset, uint32_t len,
                                 unsigned seed) {
    return submit_to(1, [=] {
        fill_pattern(cl->buf.data(), len, seed);
        return remote_error_of(cl->conns[i].write(rdma::span_of(cl->buf, 0, len), rr, offset));
    });
}

/// Connects one more client connection; accepts it on this shard.
future<rdma::connection> connect_one(rdma::listener& l, net::socket_address a) {
    auto connected = submit_to(1, [a]() -> future<> {
        if (!cl) {
            cl = new mw_client;
            cl->buf = rdma::shard_context::local().pool().allocate(8192);
        }
        cl->conns.push_back(co_await rdma::connect_rc(a));
    });
    rdma::connection c = co_await l.accept();
    co_await std::move(connected);
    co_return c;
}

/// Closes and frees the client side.
future<> drop_clients() {
    return submit_to(1, [] {
        cl->conns.clear();
        cl->buf.reset();
        delete std::exchange(cl, nullptr);
    });
}

/// Bytes of `mem` outside [from, to) still hold pattern `seed`.
bool outside_intact(const std::vector<char>& mem, size_t from, size_t to, unsigned seed) {
    return check_pattern(mem.data(), from, seed) == SIZE_MAX &&
           check_pattern(mem.data() + to, mem.size() - to, seed, to) == SIZE_MAX;
}
} // namespace

TEST(memory_window, binds_one_qp_to_its_range_and_invalidate_kills_the_rkey) {
    int rc = run_rdma(2, []() -> future<> {
        auto& ctx = rdma::shard_context::local();
        RDMA_CHECK(ctx.memory_windows()); // Soft-RoCE reports MW type 2
        const auto a = addr(next_port());
        std::vector<char> mem(8192);
        fill_pattern(mem.data(), mem.size(), 7);
        rdma::memory_region mr = rdma::register_memory(mem.data(), mem.size(), rdma::access::mw_bind);
        rdma::listener l = rdma::listen_rc(a);
        // Connections 0 (the owner) and 1 (another client) of the same peer process.
        rdma::connection owner = co_await connect_one(l, a);
        rdma::connection other = co_await connect_one(l, a);

        rdma::memory_window w = rdma::allocate_window();
        const rdma::remote_region rr = co_await owner.bind_window(
            w, mr, 1024, 2048, rdma::access::remote_write | rdma::access::remote_read);
        EXPECT_TRUE(w.bound());
        EXPECT_EQ(rr.addr, reinterpret_cast<uintptr_t>(mem.data() + 1024));
        EXPECT_EQ(rr.length, 2048u);
        EXPECT_NE(rr.rkey, mr.rkey());
        std::printf("  window rkey 0x%x (MR rkey 0x%x)\n", rr.rkey, mr.rkey());

        // The owner writes its whole range and reads it back.
        EXPECT_EQ(co_await client_write(0, rr, 0, 2048, 9), "");
        EXPECT_EQ(check_pattern(mem.data() + 1024, 2048, 9), SIZE_MAX);
        bool read_ok = co_await submit_to(1, [rr]() -> future<bool> {
            co_await cl->conns[0].read(rdma::span_of(cl->buf, 4096, 2048), rr, 0);
            co_return check_pattern(cl->buf.data() + 4096, 2048, 9) == SIZE_MAX;
        });
        EXPECT_TRUE(read_ok);

        // Another connection with the owner's rkey, inside the range: refused (type 2 windows
        // belong to the QP they were bound on).
        std::string m = co_await client_write(1, rr, 0, 64, 11);
        std::printf("  other QP: %s\n", m.c_str());
        EXPECT_NE(m.find("remote access error"), std::string::npos) << m;
        EXPECT_EQ(check_pattern(mem.data() + 1024, 2048, 9), SIZE_MAX) << "the other QP's write landed";
        // The owner still writes.
        EXPECT_EQ(co_await client_write(0, rr, 0, 64, 12), "");
        EXPECT_EQ(check_pattern(mem.data() + 1024, 64, 12), SIZE_MAX);

        // The owner's window is invalidated: its rkey is dead afterwards.
        co_await owner.invalidate_window(w);
        EXPECT_FALSE(w.bound());
        m = co_await client_write(0, rr, 0, 64, 13);
        std::printf("  owner after invalidate: %s\n", m.c_str());
        EXPECT_NE(m.find("remote access error"), std::string::npos) << m;
        EXPECT_EQ(check_pattern(mem.data() + 1024, 64, 12), SIZE_MAX) << "a write after invalidate landed";
        EXPECT_FALSE(co_await submit_to(1, [] { return cl->conns[0].usable(); }));
        EXPECT_TRUE(outside_intact(mem, 1024, 3072, 7));
        // A window still bound is deallocated when dropped (w4: its connection broke); an
        // invalidated one goes back to the free list (w).
        rdma::connection spare = co_await connect_one(l, a);
        rdma::memory_window w4 = rdma::allocate_window();
        (void)co_await spare.bind_window(w4, mr, 0, 64, rdma::access::remote_read);
        spare.close();
        w4 = {};
        EXPECT_EQ(ctx.take_window(), nullptr) << "a window still bound went back to the free list";
        EXPECT_EQ(ctx.take_window(), nullptr) << "a window still referenced was on the free list";
        w = {};
        ibv_mw* kept = ctx.take_window();
        EXPECT_NE(kept, nullptr) << "an invalidated window was not kept for reuse";
        if (kept) {
            ctx.keep_window(kept);
        }
        // Reused on a fourth connection over the same range: a new rkey; the old one stays dead.
        rdma::connection fourth = co_await connect_one(l, a); // client connection 3 (2 is spare's)
        rdma::memory_window w3 = rdma::allocate_window();
        const rdma::remote_region rr3 =
            co_await fourth.bind_window(w3, mr, 1024, 2048, rdma::access::remote_write);
        EXPECT_NE(rr3.rkey, rr.rkey);
        EXPECT_EQ(co_await client_write(3, rr3, 0, 2048, 16), "");
        EXPECT_EQ(check_pattern(mem.data() + 1024, 2048, 16), SIZE_MAX);
        rdma::remote_region stale = rr;
        m = co_await client_write(3, stale, 0, 64, 17);
        EXPECT_NE(m.find("remote access error"), std::string::npos) << "old rkey after a rebind: " << m;
        EXPECT_EQ(check_pattern(mem.data() + 1024, 2048, 16), SIZE_MAX);
        EXPECT_TRUE(outside_intact(mem, 1024, 3072, 7));

        owner.close();
        other.close();
        fourth.close();
        w3 = {};
        co_await drop_clients();
        EXPECT_TRUE(co_await all_connections_gone());
    });
    EXPECT_EQ(rc, 0);
}

TEST(memory_window, rxe_enforces_the_mr_range_not_the_window_range) {
    int rc = run_rdma(2, []() -> future<> {
        auto& ctx = rdma::shard_context::local();
        RDMA_CHECK(ctx.memory_windows());
        // rxe's responder (check_rkey in rxe_resp.c, Linux 6.1 as in the guest, unchanged since)
        // resolves a window's rkey to the window's MR and checks the access range against the
        // MR, never against the window: a peer holding the rkey reaches all of the MR. Other
        // devices must refuse (remote access error, the connection breaks).
        const bool rxe = ctx.dev().name().rfind("rxe", 0) == 0;
        const auto a = addr(next_port());
        std::vector<char> mem(8192);
        fill_pattern(mem.data(), mem.size(), 7);
        rdma::memory_region mr = rdma::register_memory(mem.data(), mem.size(), rdma::access::mw_bind);
        rdma::listener l = rdma::listen_rc(a);
        struct attempt {
            const char* what;
            int64_t offset; // from the window's start
            uint32_t len;
        };
        // The window is [1024, 3072) of the 8 KB MR.
        for (attempt t : {attempt{"across the end", 2048 - 32, 64}, attempt{"before the start", -128, 64},
                          attempt{"4 KB past the end", 2048 + 4096, 64}}) {
            fill_pattern(mem.data(), mem.size(), 7);
            rdma::connection c = co_await connect_one(l, a);
            rdma::memory_window w = rdma::allocate_window();
            const rdma::remote_region rr =
                co_await c.bind_window(w, mr, 1024, 2048, rdma::access::remote_write);
            const unsigned i = co_await submit_to(1, [] { return unsigned(cl->conns.size() - 1); });
            rdma::remote_region lie = rr; // the client's own bounds check is not what is tested
            lie.addr = uint64_t(int64_t(rr.addr) + std::min<int64_t>(t.offset, 0));
            lie.length = 8192;
            const uint64_t off = uint64_t(t.offset - std::min<int64_t>(t.offset, 0));
            std::string m = co_await client_write(i, lie, off, t.len, 21);
            const size_t at = size_t(1024 + t.offset);
            const bool landed = check_pattern(mem.data() + at, t.len, 21) == SIZE_MAX;
            std::printf("  %s (%s): %s; %s\n", t.what, ctx.dev().name().c_str(),
                        m.empty() ? "WRITE completed (IBV_WC_SUCCESS)" : m.c_str(),
                        landed ? "the bytes landed outside the window" : "nothing landed");
            if (rxe) {
                EXPECT_EQ(m, "") << "rxe now refuses a WRITE " << t.what
                                 << " of a window: it enforces the window's range (update docs/kv.md)";
                EXPECT_TRUE(landed);
            } else {
                EXPECT_NE(m.find("remote access error"), std::string::npos) << t.what << ": " << m;
                EXPECT_FALSE(landed) << t.what;
            }
            c.close();
        }
        co_await drop_clients();
        EXPECT_TRUE(co_await all_connections_gone());
    });
    EXPECT_EQ(rc, 0);
}
