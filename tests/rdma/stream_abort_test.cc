// The RDMA stream transport (Soft-RoCE guest), part of rdma_stream_test: reads that an
// abort_source cancels (read, read_up_to, read_exactly) lose no bytes; the transport's connect
// is abortable; an idle output stream holds no pool memory after a burst.
#include "rdma_test_util.hh"

#include "core/timer.hh"
#include "net/transport.hh"

#include <string>

using namespace shoal;
using namespace shoal::rdma_test;

namespace {

/// The calling shard's connected stream pair's ends, kept across submit_to calls.
struct ends {
    net::connected_socket s;
    net::input_stream in;
    net::output_stream out;
};
thread_local ends tl_ends;

/// Writes `bytes` on shard 1's stream and flushes it.
future<> write_on_1(std::string bytes) {
    return submit_to(1, [bytes = std::move(bytes)]() -> future<> {
        co_await tl_ends.out.write(bytes);
        co_await tl_ends.out.flush();
    });
}

/// The accepting side (shard 0) of a connection made from shard 1, whose ends are in shard 1's
/// `tl_ends`.
struct server_end {
    rdma::listener l;
    rdma::connection c;
    net::connected_socket s;
    net::input_stream in;
};

future<server_end> accept_from_shard_1() {
    const auto a = addr(next_port());
    server_end e;
    e.l = rdma::listen_rc(a);
    auto accepted = e.l.accept();
    co_await submit_to(1, [a]() -> future<> {
        tl_ends.s = co_await rdma::connect(a);
        tl_ends.out = tl_ends.s.output();
        tl_ends.in = tl_ends.s.input();
    });
    e.c = co_await std::move(accepted);
    e.s = e.c.socket();
    e.in = e.s.input();
    co_return e;
}

/// What `f` failed with: "abort" for abort_requested_exception, the message otherwise, "" when
/// it succeeded.
future<std::string> failure_of(future<net::temporary_buffer> f) {
    try {
        (void)co_await std::move(f);
    } catch (const abort_requested_exception&) {
        co_return std::string("abort");
    } catch (const std::exception& e) {
        co_return std::string(e.what());
    }
    co_return std::string();
}

} // namespace

TEST(stream_abort, aborted_reads_fail_at_once_and_lose_no_bytes) {
    int rc = run_rdma(2, []() -> future<> {
        server_end e = co_await accept_from_shard_1();
        net::input_stream& in = e.in;
        const auto bound = steady_clock_type::now() + patience; // every wait below; a hang fails here

        // read(as): pending, then aborted: fails with the reason; the bytes sent later are
        // read by the next (plain) read.
        {
            abort_source as;
            auto pending = in.read(as);
            co_await sleep(20ms);
            RDMA_CHECK(!pending.available());
            as.request_abort();
            EXPECT_EQ(co_await with_timeout(bound, failure_of(std::move(pending))), "abort");
            co_await write_on_1("hello");
            net::temporary_buffer b = co_await with_timeout(bound, in.read());
            EXPECT_EQ(std::string(b.view()), "hello");
        }
        // An already aborted source fails the read without consuming what is there.
        {
            co_await write_on_1("kept");
            co_await sleep(20ms);
            abort_source as;
            as.request_abort();
            EXPECT_EQ(co_await failure_of(in.read(as)), "abort");
            EXPECT_EQ(co_await failure_of(in.read_up_to(100, as)), "abort");
            EXPECT_EQ(co_await failure_of(in.read_exactly(4, as)), "abort");
            net::temporary_buffer b = co_await with_timeout(bound, in.read_exactly(4));
            EXPECT_EQ(std::string(b.view()), "kept");
        }
        // read_exactly(as) aborted part-way: the gathered bytes come back first, in order.
        {
            abort_source as;
            co_await write_on_1("0123");
            auto pending = in.read_exactly(10, as);
            co_await sleep(50ms);
            RDMA_CHECK(!pending.available());
            as.request_abort();
            EXPECT_EQ(co_await with_timeout(bound, failure_of(std::move(pending))), "abort");
            co_await write_on_1("456789");
            net::temporary_buffer b = co_await with_timeout(bound, in.read_exactly(10));
            EXPECT_EQ(std::string(b.view()), "0123456789");
        }
        // read_up_to(as) that is not aborted behaves as read_up_to; the rest stays.
        {
            abort_source as;
            auto pending = in.read_up_to(3, as);
            co_await write_on_1("abcdef");
            net::temporary_buffer b = co_await with_timeout(bound, std::move(pending));
            EXPECT_EQ(std::string(b.view()), "abc");
            as.request_abort(); // after it resolved: no effect on later reads
            net::temporary_buffer rest = co_await with_timeout(bound, in.read());
            EXPECT_EQ(std::string(rest.view()), "def");
        }
        co_await submit_to(1, []() -> future<> {
            co_await tl_ends.out.close();
            tl_ends = ends();
        });
        net::temporary_buffer end = co_await with_timeout(bound, in.read());
        EXPECT_TRUE(end.empty());
        e = server_end();
        EXPECT_TRUE(co_await all_connections_gone());
        EXPECT_EQ(buffers_held(), 0u);
    });
    EXPECT_EQ(rc, 0);
}

TEST(stream_abort, the_transport_connect_is_abortable) {
    int rc = run_rdma(1, []() -> future<> {
        const auto a = addr(next_port());
        net::transport t = net::make_transport("rdma");
        net::server_socket srv = t.listen(a, {});
        const auto bound = steady_clock_type::now() + patience;
        // Aborted while it resolves the address: fails with the reason, frees what it made.
        {
            abort_source as;
            auto f = t.connect_abortable(a, as);
            RDMA_CHECK(!f.available());
            as.request_abort();
            bool aborted = false;
            try {
                (void)co_await with_timeout(bound, std::move(f));
            } catch (const abort_requested_exception&) {
                aborted = true;
            }
            EXPECT_TRUE(aborted);
        }
        // Not aborted: an ordinary connection that carries bytes.
        {
            abort_source as;
            auto accepted = srv.accept();
            net::connected_socket s = co_await with_timeout(bound, t.connect_abortable(a, as));
            net::accept_result ar = co_await with_timeout(bound, std::move(accepted));
            net::output_stream out = s.output();
            net::input_stream in = ar.connection.input();
            co_await out.write("x");
            co_await out.flush();
            net::temporary_buffer b = co_await with_timeout(bound, in.read());
            EXPECT_EQ(std::string(b.view()), "x");
            as.request_abort(); // after the connect: nothing happens to the connection
            co_await out.close();
            EXPECT_TRUE((co_await with_timeout(bound, in.read())).empty());
        }
        srv = net::server_socket();
        EXPECT_TRUE(co_await all_connections_gone());
    });
    EXPECT_EQ(rc, 0);
}

TEST(stream_abort, an_idle_output_stream_holds_no_pool_memory) {
    int rc = run_rdma(2, []() -> future<> {
        server_end e = co_await accept_from_shard_1();
        net::input_stream& in = e.in;
        const auto bound = steady_clock_type::now() + patience;
        // A burst of small and large writes from shard 1, read here; then both sides idle.
        constexpr size_t total = 200 * 1000 + 3 * 100000;
        auto burst = submit_to(1, []() -> future<> {
            std::string small(1000, 's');
            std::string large(100000, 'L');
            for (int i = 0; i < 200; ++i) {
                co_await tl_ends.out.write(small);
                if (i % 10 == 9) {
                    co_await tl_ends.out.flush();
                }
            }
            for (int i = 0; i < 3; ++i) {
                co_await tl_ends.out.write(large);
            }
            co_await tl_ends.out.flush();
        });
        size_t got = 0;
        while (got < total) {
            net::temporary_buffer b = co_await with_timeout(bound, in.read());
            RDMA_CHECK(!b.empty());
            got += b.size();
        }
        co_await std::move(burst);
        EXPECT_EQ(got, total);
        // Shard 1's pool holds nothing but its posted receives once the sends completed, with
        // the stream still open (before: its 16 KiB gathering buffer stayed held).
        bool idle = co_await submit_to(1, [] { return eventually([] { return buffers_held() == 0; }); });
        uint64_t held = co_await submit_to(1, [] { return buffers_held(); });
        EXPECT_TRUE(idle) << held << " pool buffers held by an idle output stream";
        // It still writes after being idle.
        co_await write_on_1("again");
        net::temporary_buffer b = co_await with_timeout(bound, in.read());
        EXPECT_EQ(std::string(b.view()), "again");
        co_await submit_to(1, []() -> future<> {
            co_await tl_ends.out.close();
            tl_ends = ends();
        });
        EXPECT_TRUE((co_await with_timeout(bound, in.read())).empty());
        e = server_end();
        EXPECT_TRUE(co_await all_connections_gone());
    });
    EXPECT_EQ(rc, 0);
}
