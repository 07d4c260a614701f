// Receive size classes (Soft-RoCE guest): `connection_options::recv_buffer_size` picks the
// shared receive queue a connection's QP takes its receives from and the size it advertises.
// A size that is no class and one class too many are refused with the reason; connections whose
// two ends use different classes stream correctly both ways; a class nobody uses any more is
// freed with its receives.
#include "rdma_test_util.hh"

#include <stdexcept>

using namespace shoal;
using namespace shoal::rdma_test;

namespace {

/// "invalid_argument: <what>" / "connection_error: <what>" / "other: <what>" of what `f`
/// fails with ("" when it succeeds).
std::string kind_of(const std::exception_ptr& ex) {
    try {
        std::rethrow_exception(ex);
    } catch (const std::invalid_argument& e) {
        return std::string("invalid_argument: ") + e.what();
    } catch (const rdma::connection_error& e) {
        return std::string("connection_error: ") + e.what();
    } catch (const std::exception& e) {
        return std::string("other: ") + e.what();
    }
}

future<std::string> failure_of(future<rdma::connection> f) {
    try {
        (void)co_await std::move(f);
    } catch (...) {
        co_return kind_of(std::current_exception());
    }
    co_return std::string();
}

/// What `listen_rc` on `a` with receive class `recv_class` throws ("" when it listens; the
/// listener is closed again).
std::string listen_failure(net::socket_address a, size_t recv_class) {
    rdma::listen_options lo;
    lo.connection = rdma::shard_context::local().opts().connection;
    lo.connection->recv_buffer_size = recv_class;
    try {
        rdma::listener l = rdma::listen_rc(a, lo);
    } catch (...) {
        return kind_of(std::current_exception());
    }
    return {};
}

rdma::connection_options of_class(size_t recv_class) {
    rdma::connection_options co = rdma::shard_context::local().opts().connection;
    co.recv_buffer_size = recv_class;
    return co;
}

bool contains(const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
}

} // namespace

TEST(receive_class, a_size_that_is_no_class_and_one_class_too_many_are_refused) {
    int rc = run_rdma(2, []() -> future<> {
        auto& ctx = rdma::shard_context::local();
        const uint64_t base_in_use = ctx.pool().stats().in_use_bytes;
        const auto a = addr(next_port());
        // Not a power of two, below 256 B, above the pool's largest buffer (1 MiB).
        for (size_t bad : {size_t(3000), size_t(128), size_t(2) << 20}) {
            std::string err = co_await failure_of(rdma::connect_rc(a, of_class(bad)));
            EXPECT_TRUE(contains(err, "invalid_argument: connection_options::recv_buffer_size " +
                                          std::to_string(bad) + " is not a receive size class"))
                << err;
            err = listen_failure(addr(next_port()), bad);
            EXPECT_TRUE(contains(err, "invalid_argument: connection_options::recv_buffer_size " +
                                          std::to_string(bad)))
                << err;
        }
        EXPECT_EQ(ctx.stats().srq_classes, 1u) << "a refused size made no class";
        // The default class (16 KiB in the tests) and three more: the most a shard holds.
        std::vector<rdma::listener> ls;
        std::vector<net::socket_address> at;
        for (size_t c : {256, 512, 1024}) {
            at.push_back(addr(next_port()));
            rdma::listen_options lo;
            lo.connection = of_class(c);
            ls.push_back(rdma::listen_rc(at.back(), lo));
        }
        const auto st = ctx.stats();
        EXPECT_EQ(st.srq_classes, 4u);
        for (unsigned i = 0; i < st.srq_classes; ++i) {
            EXPECT_EQ(st.srq_class[i].buffer_size, i == 0 ? size_t(16) << 10 : size_t(128) << i);
            EXPECT_EQ(st.srq_class[i].posted, st.srq_class[i].slack) << "its slack, posted when made";
            EXPECT_EQ(st.srq_class[i].committed, 0u);
        }
        std::string err = listen_failure(addr(next_port()), 2048);
        EXPECT_TRUE(contains(err, "connection_error: no receive size class of 2048 bytes on shard 0: it "
                                  "holds the most it may (4: 16384, 256, 512, 1024 bytes)"))
            << err;
        err = co_await failure_of(rdma::connect_rc(at[0], of_class(2048)));
        EXPECT_TRUE(contains(err, "no receive size class of 2048 bytes on shard 0")) << err;
        // An existing class (and the default one asked for by its size) still works; the
        // connection advertises its class and is served from that class's SRQ.
        rdma::connection c = co_await rdma::connect_rc(at[1], of_class(256));
        EXPECT_EQ(c.peer_recv_buffer_size(), 512u);
        rdma::connection s = co_await ls[1].accept();
        EXPECT_EQ(s.peer_recv_buffer_size(), 256u);
        const auto with = ctx.stats();
        EXPECT_EQ(with.srq_class[1].committed + with.srq_class[2].committed, 2 * 4u)
            << "each end's idle window and control credits, in its own class";
        EXPECT_EQ(with.srq_class[0].committed, 0u);
        EXPECT_EQ(co_await failure_of(rdma::connect_rc(at[2], of_class(16 << 10))), "");
        // Classes nobody uses are freed with their receives: the pool is back where it was.
        c = rdma::connection();
        s = rdma::connection();
        ls.clear();
        RDMA_CHECK(co_await all_connections_gone());
        RDMA_CHECK(co_await eventually([&] { return ctx.stats().srq_classes == 1; }));
        EXPECT_EQ(ctx.pool().stats().in_use_bytes, base_in_use);
        // ... and a class can be made again.
        EXPECT_EQ(listen_failure(addr(next_port()), 2048), "");
    });
    EXPECT_EQ(rc, 0);
}

namespace {

/// Reads `size` pattern bytes (`seed`) from `in`, then writes `size` of `seed + 1` back and ends
/// the stream; returns the offset of the first bad byte read or SIZE_MAX.
future<size_t> read_then_write(rdma::connection& c, size_t size, unsigned seed) {
    net::connected_socket s = c.socket();
    net::input_stream in = s.input();
    net::output_stream out = s.output();
    size_t bad = co_await read_pattern(in, size, seed);
    co_await write_pattern(out, size, seed + 1, 100 << 10);
    co_await out.close();
    co_return bad;
}

/// The client end: connects to `a` in class `mine`, expects the server's `theirs`, writes
/// `size` pattern bytes (`seed`) and reads `size` of `seed + 1` back; returns the offset of the
/// first bad byte read or SIZE_MAX.
future<size_t> write_then_read(net::socket_address a, size_t mine, size_t theirs, size_t size,
                               unsigned seed) {
    rdma::connection c = co_await rdma::connect_rc(a, of_class(mine));
    EXPECT_EQ(c.peer_recv_buffer_size(), theirs);
    net::connected_socket s = c.socket();
    net::input_stream in = s.input();
    net::output_stream out = s.output();
    co_await write_pattern(out, size, seed, 100 << 10);
    size_t bad = co_await read_pattern(in, size, seed + 1);
    co_await out.close();
    net::temporary_buffer end = co_await in.read();
    EXPECT_TRUE(end.empty());
    // What this side received came in messages of at most its own class.
    const auto st = c.stats();
    EXPECT_GE(st.messages_received, size / mine);
    co_return bad;
}

} // namespace

TEST(receive_class, the_two_ends_of_a_connection_may_use_different_classes) {
    // Client 4 KiB / server 64 KiB, the reverse, and 4 KiB against the default class (16 KiB in
    // the tests): 1 MiB each way, each end splitting what it sends to the other's class (a
    // larger message would fail the receive with a length error and break the QP).
    int rc = run_rdma(2, []() -> future<> {
        auto& ctx = rdma::shard_context::local();
        const size_t def = ctx.opts().recv_buffer_size;
        const size_t size = 1 << 20;
        unsigned seed = 1;
        for (auto [client, server] : {std::pair<size_t, size_t>{4096, 65536}, {65536, 4096}, {4096, 0}}) {
            const auto a = addr(next_port());
            rdma::listen_options lo;
            lo.connection = of_class(server);
            rdma::listener l = rdma::listen_rc(a, lo);
            const size_t server_class = server ? server : def;
            auto accepted = l.accept();
            future<size_t> cf = submit_to(1, [a, client, server_class, size, seed] {
                return write_then_read(a, client, server_class, size, seed);
            });
            rdma::connection c = co_await std::move(accepted);
            EXPECT_EQ(c.peer_recv_buffer_size(), client);
            size_t bad_here = co_await read_then_write(c, size, seed);
            size_t bad_there = co_await std::move(cf);
            EXPECT_EQ(bad_here, SIZE_MAX) << "client " << client << " -> server " << server_class;
            EXPECT_EQ(bad_there, SIZE_MAX) << "server " << server_class << " -> client " << client;
            EXPECT_GE(c.stats().messages_received, size / server_class);
            seed += 2;
        }
        RDMA_CHECK(co_await all_connections_gone());
        RDMA_CHECK(co_await eventually([&] { return ctx.stats().srq_classes == 1; }));
        EXPECT_EQ(buffers_held(), 0u);
    });
    EXPECT_EQ(rc, 0);
}
