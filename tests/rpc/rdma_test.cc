// The core RPC suite (rpc_suite.hh, instantiated as rpc_rdma/core_suite/0) over RDMA on the
// message path (rpc/rdma_link), and the message path's own cases (one message per small call,
// large bodies by READ, releases, a call beside a raw RDMA stream round trip): run in the
// Soft-RoCE guest (label rdma), binding and connecting to SHOAL_RDMA_IP.

#include "rpc_suite.hh"

#include "../rdma/rdma_test_util.hh"
#include "../softroce/callgrind_marks.hh"
#include "core/reactor.hh"
#include "net/rdma/context.hh"
#include "rpc/rdma_link.hh"

#include <cstdio>
#include <cstring>
#include <map>

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::rpc_test;

namespace {

/// Runs `body` on a fresh engine of `smp` shards with RDMA started (reactor settings `cfg`).
void run_body(std::function<future<>(rpc_env&)> body, unsigned smp = 1, reactor_config cfg = {}) {
    EXPECT_EQ(rdma_test::run_rdma(
                  smp,
                  [body]() -> future<> {
                      rpc_env env{net::make_transport("rdma"),
                                  [] { return rdma_test::addr(rdma_test::next_port()); }};
                      co_await body(env);
                  },
                  rdma_test::test_options(), cfg),
              0);
}

/// Tasks one call at concurrency 1 may run on its shard (client and server together).
/// Measured: 1, the caller's resume: request and reply are the first frames of their loop
/// iteration on their link, so each leaves at once, without the flush task (3 with the flush
/// tasks, 10 before the link's fifth round of cuts, 8 before it took messages from the receive
/// completion, 6 before client and server took frames from the link as they complete); the
/// half is room for a stray timer task.
constexpr double max_tasks_per_call = 1.5;
/// Tasks a raw stream round trip (write, flush, read) may run at concurrency 1 on one shard.
/// Measured: 4 (the half is room for a stray timer task).
constexpr double max_stream_tasks_per_round_trip = 4.5;

/// Counters of this shard's RDMA links, to take differences of.
rpc::rdma_link_stats link_stats() {
    return rpc::rdma_link_stats_here();
}

/// Server and client options with `set` applied to both (an RDMA setting both ends share).
template <typename F>
std::pair<rpc::server_options, rpc::client_options> both_options(F set) {
    std::pair<rpc::server_options, rpc::client_options> o;
    set(o.first);
    set(o.second);
    return o;
}

/// `size` bytes of a pattern that differs per size.
std::string pattern(size_t size) {
    std::string s(size, '\0');
    for (size_t i = 0; i < size; ++i) {
        s[i] = char((i * 131 + size) >> 3);
    }
    return s;
}

/// Small calls: one message each way (no READ); calls issued together, and the replies the
/// server makes together, share messages (coalescing), unless the options turn it off.
TEST(rpc_rdma_path, small_calls_ready_together_share_a_message) {
    // No time quota: with one, a slow (ASan) build could be preempted between the 64 calls
    // and send them in several batches (40 messages instead of at most 16 were seen); what
    // this test checks is that calls made together leave together.
    reactor_config no_time_quota;
    no_time_quota.task_quota_time = std::chrono::microseconds(0);
    for (bool coalesce : {true, false}) {
        run_body(
            [coalesce](rpc_env& env) -> future<> {
                auto [so, co] = both_options([&](auto& o) { o.rdma.coalesce = coalesce; });
                fixture fx(env, so, co);
                co_await fx.client.connect(fx.address);
                auto before = link_stats();
                for (int i = 0; i < 100; ++i) {
                    EXPECT_EQ(co_await fx.client.call<&add>(i, 1), i + 1);
                }
                auto middle = link_stats();
                // Client and server share this shard: one call at a time is one message out and one
                // back, whatever the setting.
                EXPECT_EQ(middle.frames_sent - before.frames_sent, 2u * 100);
                EXPECT_EQ(middle.messages_sent - before.messages_sent, 2u * 100);
                EXPECT_EQ(middle.messages_received - before.messages_received, 2u * 100);
                std::vector<future<int32_t>> batch;
                for (int i = 0; i < 64; ++i) {
                    batch.push_back(fx.client.call<&add>(i, 2));
                }
                for (int i = 0; i < 64; ++i) {
                    EXPECT_EQ(co_await std::move(batch[i]), i + 2);
                }
                auto after = link_stats();
                EXPECT_EQ(after.frames_sent - middle.frames_sent, 2u * 64);
                EXPECT_EQ(after.frames_received - middle.frames_received, 2u * 64);
                EXPECT_EQ(after.messages_received - middle.messages_received,
                          after.messages_sent - middle.messages_sent);
                if (coalesce) {
                    // The 64 requests leave in one task: together they are far below the 16 KiB the
                    // peer receives, so they share one message; the replies share some too.
                    EXPECT_LE(after.messages_sent - middle.messages_sent, 2u * 8)
                        << "frames were not coalesced";
                } else {
                    EXPECT_EQ(after.messages_sent - middle.messages_sent, 2u * 64);
                }
                EXPECT_EQ(after.remote_bodies_sent, before.remote_bodies_sent);
                co_await fx.stop();
            },
            1, no_time_quota);
    }
}

/// Many callers, each with one call at a time on one connection (shoal-rpc-bench at c=16): the
/// callers resumed by one message of replies send their next calls together, and the replies to
/// a message of calls leave together. A frame that leaves at once (the first of its loop
/// iteration) must not split those batches: with it sent alone whenever it was the first, each
/// batch took two messages and c=16 lost more than half its QPS in the guest.
TEST(rpc_rdma_path, callers_resumed_together_share_a_message) {
    reactor_config no_time_quota; // (as above: a preempted round would split a batch)
    no_time_quota.task_quota_time = std::chrono::microseconds(0);
    run_body(
        [](rpc_env& env) -> future<> {
            fixture fx(env);
            co_await fx.client.connect(fx.address);
            constexpr int callers = 16;
            constexpr int calls_each = 50;
            auto before = link_stats();
            std::vector<future<>> running;
            for (int c = 0; c < callers; ++c) {
                running.push_back([](rpc::client& client, int c) -> future<> {
                    for (int i = 0; i < calls_each; ++i) {
                        EXPECT_EQ(co_await client.call<&add>(c, i), c + i);
                    }
                }(fx.client, c));
            }
            for (auto& r : running) {
                co_await std::move(r);
            }
            auto after = link_stats();
            const uint64_t frames = after.frames_sent - before.frames_sent;
            const uint64_t messages = after.messages_sent - before.messages_sent;
            std::printf("%d callers x %d calls: %lu frames in %lu messages\n", callers, calls_each,
                        (unsigned long)frames, (unsigned long)messages);
            EXPECT_EQ(frames, 2u * callers * calls_each);
            EXPECT_EQ(after.messages_received - before.messages_received, messages);
            // A batch of 16 calls (or replies) is one message: ~16 frames per message, 8 if
            // each batch were split in two.
            EXPECT_LE(messages * 12, frames) << "batches of calls or replies were split";
            co_await fx.stop();
        },
        1, no_time_quota);
}

/// One call at a time (client and server on this shard) runs a bounded number of tasks per
/// call: a waiting message read is resolved by the receive itself and the flush task sends
/// without a coroutine (docs/performance-history.md, "The per-call cost at concurrency 1").
TEST(rpc_rdma_path, a_call_at_a_time_runs_few_tasks) {
    reactor_config no_time_quota; // no preemption round trips in the count
    no_time_quota.task_quota_time = std::chrono::microseconds(0);
    run_body(
        [](rpc_env& env) -> future<> {
            fixture fx(env);
            co_await fx.client.connect(fx.address);
            for (int i = 0; i < 10; ++i) {
                EXPECT_EQ(co_await fx.client.call<&add>(i, 1), i + 1);
            }
            constexpr uint64_t calls = 200;
            const uint64_t before = local_reactor().stats().tasks_run;
            const auto posts_before = net::rdma::shard_context::local().stats();
            SHOAL_CALLGRIND_ZERO();
            for (uint64_t i = 0; i < calls; ++i) {
                EXPECT_EQ(co_await fx.client.call<&add>(int32_t(i), 1), int32_t(i) + 1);
            }
            SHOAL_CALLGRIND_DUMP("rpc call add(int32 int32)/200");
            const double per_call = double(local_reactor().stats().tasks_run - before) / calls;
            const auto posts_after = net::rdma::shard_context::local().stats();
            const double posts = double(posts_after.post_send_calls - posts_before.post_send_calls) / calls;
            std::printf("per call at concurrency 1: %.2f tasks, %.2f ibv_post_send calls, %.2f send WRs\n",
                        per_call, posts,
                        double(posts_after.send_requests - posts_before.send_requests) / calls);
            EXPECT_LE(per_call, max_tasks_per_call);
            // One SEND each way and nothing else (no credit-only message): the wire does what
            // the raw stream's round trip does.
            EXPECT_LE(posts, 2.05);
            co_await fx.stop();
        },
        1, no_time_quota);
}

/// The end of a measured loop of `rounds` operations that began when the shard had run `before`
/// tasks: every echo came back intact and each operation ran at most `max_tasks` tasks.
void check_loop(const char* what, uint64_t before, int rounds, bool intact, double max_tasks) {
    const double per_op = double(local_reactor().stats().tasks_run - before) / rounds;
    std::printf("%s: %.2f\n", what, per_op);
    EXPECT_TRUE(intact) << what;
    EXPECT_LE(per_op, max_tasks) << what;
}

/// The baseline of the RPC's per-call cost: a 128-byte round trip on the raw RDMA stream (the
/// path `shoal-echo --transport rdma` measures), one at a time on one shard, with an attachment
/// call of the same size over RPC next to it. Both echo the bytes intact; the stream runs few
/// tasks per round trip, and a call at most `max_tasks_per_call`. Under callgrind
/// (bench/instructions_per_op.sh) each loop is a dump of its own, which puts the two paths'
/// user-space instructions side by side.
TEST(rpc_rdma_path, a_call_and_a_raw_stream_round_trip_side_by_side) {
    reactor_config no_time_quota;
    no_time_quota.task_quota_time = std::chrono::microseconds(0);
    run_body(
        [](rpc_env& env) -> future<> {
            constexpr int rounds = 200;
            const std::string bytes = pattern(128);
            {
                fixture fx(env);
                co_await fx.client.connect(fx.address);
                net::temporary_buffer payload = net::temporary_buffer::copy_of(bytes);
                for (int i = 0; i < 20; ++i) {
                    (void)co_await fx.client.call<&echo_attachment>(rpc::attachment(payload.share()));
                }
                bool intact = true;
                const uint64_t before = local_reactor().stats().tasks_run;
                SHOAL_CALLGRIND_ZERO();
                for (int i = 0; i < rounds; ++i) {
                    rpc::attachment back =
                        co_await fx.client.call<&echo_attachment>(rpc::attachment(payload.share()));
                    intact = intact && back.view() == bytes;
                }
                SHOAL_CALLGRIND_DUMP("rpc call echo(attachment 128 B)/200");
                check_loop("RPC echo of 128 B: tasks per call", before, rounds, intact, max_tasks_per_call);
                co_await fx.stop();
            }
            const net::socket_address address = env.next_address();
            net::server_socket listener = env.transport.listen(address, {});
            future<> served = listener.accept().then(
                [](net::accept_result a) { return rdma_test::echo_stream(std::move(a.connection)); });
            net::connected_socket c = co_await env.transport.connect(address);
            auto in = c.input();
            auto out = c.output();
            net::temporary_buffer msg = net::temporary_buffer::copy_of(bytes);
            std::string got;
            // As shoal-echo's client: the write and its flush proceed while the reply is read.
            auto round_trip = [&]() -> future<> {
                future<> written = out.write(msg.share()).then([&out] { return out.flush(); });
                got.clear();
                while (got.size() < bytes.size()) {
                    net::temporary_buffer b = co_await in.read_up_to(bytes.size() - got.size());
                    if (b.empty()) {
                        throw std::runtime_error("the echo server closed the stream");
                    }
                    got.append(b.view());
                }
                co_await std::move(written);
            };
            for (int i = 0; i < 20; ++i) {
                co_await round_trip();
            }
            bool intact = true;
            const uint64_t before = local_reactor().stats().tasks_run;
            SHOAL_CALLGRIND_ZERO();
            for (int i = 0; i < rounds; ++i) {
                co_await round_trip();
                intact = intact && got == bytes;
            }
            SHOAL_CALLGRIND_DUMP("raw stream round trip 128 B/200");
            check_loop("raw stream echo of 128 B: tasks per round trip", before, rounds, intact,
                       max_stream_tasks_per_round_trip);
            co_await out.close();
            co_await std::move(served);
            listener.abort_accept();
        },
        1, no_time_quota);
}

/// A message of several frames is split by the receiver (each request answered); a message
/// whose bytes after a frame are not a whole frame closes the connection as a protocol error.
TEST(rpc_rdma_path, a_message_of_several_frames_is_split_and_checked) {
    run_body([](rpc_env& env) -> future<> {
        fixture fx(env);
        auto c = co_await net::rdma::connect_rc(fx.address);
        net::message_connection m = c.messages();
        auto request = [](uint64_t id, int32_t x) {
            auto f = rpc::make_frame(rpc::frame_type::request, x, int32_t(1000));
            f.header.verb = rpc::verb_id<&add>;
            f.header.signature = rpc::signature_hash<&add>;
            f.header.request_id = id;
            f.header.encode(f.head.get_write());
            return std::move(f.head);
        };
        co_await m.send(request(1, 1), request(2, 2), request(3, 3));
        std::map<uint64_t, int32_t> replies;
        while (replies.size() < 3) {
            std::optional<net::temporary_buffer> msg =
                co_await with_timeout(steady_clock_type::now() + rpc_test::patience, m.receive());
            if (!msg) {
                ADD_FAILURE() << "the server closed after " << replies.size() << " replies";
                break;
            }
            for (size_t off = 0; off < msg->size();) {
                auto h = rpc::frame_header::decode(msg->get() + off, 1 << 20);
                EXPECT_EQ(h.type, rpc::frame_type::response);
                int32_t v = 0;
                EXPECT_EQ(h.payload_size, sizeof v);
                std::memcpy(&v, msg->get() + off + rpc::frame_header::size, sizeof v);
                replies[h.request_id] = v;
                off += rpc::frame_header::size + h.body_size();
            }
        }
        EXPECT_EQ(replies, (std::map<uint64_t, int32_t>{{1, 1001}, {2, 1002}, {3, 1003}}));
        const uint64_t errors = fx.server.stats().protocol_errors;
        co_await m.send(request(4, 4), net::temporary_buffer::copy_of(std::string_view("garbage!!")));
        EXPECT_TRUE(co_await eventually([&] { return fx.server.stats().protocol_errors == errors + 1; }))
            << "a message with 9 bytes after its frame was taken";
        EXPECT_TRUE(co_await eventually([&] { return fx.server.stats().connections_open == 0; }));
        m.abort();
        co_await fx.stop();
    });
}

/// Attachments of 1 MB and 8 MB (and a 200 KB string argument) round-trip intact; their bodies
/// travel by READ in both directions and every export is released.
TEST(rpc_rdma_path, large_attachments_round_trip_by_read) {
    run_body([](rpc_env& env) -> future<> {
        fixture fx(env);
        co_await fx.client.connect(fx.address);
        for (size_t size : {size_t(1) << 20, size_t(8) << 20, size_t(1) << 20}) {
            auto before = link_stats();
            std::string payload = pattern(size);
            rpc::attachment a = co_await fx.client.call<&echo_attachment>(
                rpc::attachment(net::temporary_buffer::copy_of(payload)));
            EXPECT_EQ(a.size(), size);
            EXPECT_TRUE(a.view() == payload) << "attachment of " << size << " bytes came back changed";
            auto after = link_stats();
            EXPECT_EQ(after.remote_bodies_received - before.remote_bodies_received, 2u) << size;
            EXPECT_EQ(after.bytes_read - before.bytes_read, 2 * size) << size;
        }
        std::string text = pattern(200 << 10);
        auto before = link_stats();
        EXPECT_TRUE(co_await fx.client.call<&echo_view>(std::string_view(text)) == text);
        EXPECT_EQ(link_stats().remote_bodies_received - before.remote_bodies_received, 2u);
        // An 8 KB attachment fits the peer's receive buffer (16 KiB in these tests): one message
        // each way.
        before = link_stats();
        std::string small = pattern(8 << 10);
        rpc::attachment s =
            co_await fx.client.call<&echo_attachment>(rpc::attachment(net::temporary_buffer::copy_of(small)));
        EXPECT_TRUE(s.view() == small);
        EXPECT_EQ(link_stats().remote_bodies_received, before.remote_bodies_received);
        // The last release (of the reply) follows the reply itself.
        EXPECT_TRUE(co_await eventually([] { return link_stats().exports_held == 0; }))
            << link_stats().exports_held << " exports still held";
        co_await fx.stop();
    });
}

/// Echoes of the same 1 MB attachment register nothing once warm: the client's attachment is
/// found in its link's registration cache, each side READs into a cached block, and the server
/// sends back the block it READ into without registering it. Without the cache (size 0) each
/// call costs three registrations.
TEST(rpc_rdma_path, repeated_large_attachments_are_not_registered_again) {
    for (size_t cache : {size_t(32) << 20, size_t(0)}) {
        run_body([cache](rpc_env& env) -> future<> {
            auto [so, co] = both_options([&](auto& o) { o.rdma.registration_cache = cache; });
            fixture fx(env, so, co);
            co_await fx.client.connect(fx.address);
            net::temporary_buffer payload(size_t(1) << 20);
            rdma_test::fill_pattern(payload.get_write(), payload.size(), 11);
            auto echo_once = [&]() -> future<> {
                rpc::attachment a =
                    co_await fx.client.call<&echo_attachment>(rpc::attachment(payload.share()));
                EXPECT_TRUE(a.view() == payload.view()) << "the 1 MB attachment came back changed";
            };
            for (int i = 0; i < 3; ++i) { // warm-up: the server may need a second block while
                co_await echo_once();     // its previous reply's release is on its way
            }
            auto before = link_stats();
            for (int i = 0; i < 10; ++i) {
                co_await echo_once();
            }
            auto after = link_stats();
            EXPECT_EQ(after.remote_bodies_received - before.remote_bodies_received, 20u);
            if (cache > 0) {
                EXPECT_EQ(after.registrations - before.registrations, 0u) << "registrations in 10 warm calls";
                EXPECT_EQ(after.registration_hits - before.registration_hits, 40u)
                    << "client send, server target, server reply, client target: 4 per call";
            } else {
                EXPECT_EQ(after.registrations - before.registrations, 30u)
                    << "client send, server target, client target: 3 per call without a cache";
            }
            co_await fx.stop();
        });
    }
}

/// Many large calls at once on one connection: 6 × 1 MB and 2 × 8 MB, each with its own bytes;
/// with 16 READs allowed in flight their bodies are READ in parallel (several at once, the 8 MB
/// ones in 1 MiB pieces) and each
/// caller gets its own bytes back whatever order the READs finish in.
TEST(rpc_rdma_path, large_bodies_in_flight_together_reach_their_calls) {
    run_body([](rpc_env& env) -> future<> {
        // The default (1) READs one body at a time.
        auto [so, co] = both_options([](auto& o) { o.rdma.max_reads = 16; });
        fixture fx(env, so, co);
        co_await fx.client.connect(fx.address);
        std::vector<net::temporary_buffer> payloads;
        for (unsigned i = 0; i < 8; ++i) {
            const size_t size = i % 4 == 3 ? size_t(8) << 20 : size_t(1) << 20;
            payloads.emplace_back(size);
            rdma_test::fill_pattern(payloads.back().get_write(), size, 100 + i);
        }
        for (int round = 0; round < 2; ++round) {
            auto before = link_stats();
            std::vector<future<rpc::attachment>> calls;
            for (auto& p : payloads) {
                calls.push_back(fx.client.call<&echo_attachment>(rpc::attachment(p.share())));
            }
            for (unsigned i = 0; i < calls.size(); ++i) {
                rpc::attachment a = co_await std::move(calls[i]);
                EXPECT_EQ(a.size(), payloads[i].size()) << "call " << i;
                EXPECT_EQ(rdma_test::check_pattern(a.view().data(), a.size(), 100 + i), SIZE_MAX)
                    << "call " << i << " got bytes that are not its own";
            }
            auto after = link_stats();
            EXPECT_EQ(after.remote_bodies_received - before.remote_bodies_received, 16u);
            EXPECT_GT(after.parallel_reads - before.parallel_reads, 0u) << "no two bodies were READ at once";
        }
        EXPECT_TRUE(co_await eventually([] { return link_stats().exports_held == 0; }))
            << link_stats().exports_held << " exports still held";
        co_await fx.stop();
    });
}

/// A receiver that dies during the READ of a body (here a raw client that asks for an 8 MB reply,
/// starts reading it and closes its connection) never releases it: the sender frees its export
/// when the connection breaks, and the server forgets the connection.
TEST(rpc_rdma_path, receiver_dying_mid_read_frees_the_senders_hold) {
    run_body([](rpc_env& env) -> future<> {
        fixture fx(env);
        const uint64_t held_before = link_stats().exports_held;
        auto c = co_await net::rdma::connect_rc(fx.address);
        net::message_connection m = c.messages();
        constexpr uint32_t size = 8 << 20;
        auto f = rpc::make_frame(rpc::frame_type::request, size, std::string("x"));
        f.header.verb = rpc::verb_id<&big_reply>;
        f.header.signature = rpc::signature_hash<&big_reply>;
        f.header.request_id = 1;
        f.header.encode(f.head.get_write());
        co_await m.send(std::move(f.head));
        std::optional<net::temporary_buffer> reply =
            co_await with_timeout(steady_clock_type::now() + rpc_test::patience, m.receive());
        if (!reply || reply->size() < rpc::frame_header::size + 24) {
            ADD_FAILURE() << "no descriptor message";
            co_await fx.stop();
            co_return;
        }
        auto h = rpc::frame_header::decode(reply->get(), 64 << 20);
        EXPECT_EQ(h.flags, rpc::frame_header::flag_remote_attachments);
        EXPECT_EQ(h.attachment_size, size);
        EXPECT_EQ(link_stats().exports_held, held_before + 1) << "the server holds its reply for the READ";
        net::rdma::remote_region r;
        uint32_t len;
        const char* p = reply->get() + rpc::frame_header::size + 8;
        std::memcpy(&r.addr, p, 8);
        std::memcpy(&r.rkey, p + 8, 4);
        std::memcpy(&len, p + 12, 4);
        r.length = len;
        EXPECT_EQ(len, size);
        auto target = net::rdma::shard_context::local().pool().allocate(1 << 20);
        auto reading = c.read(net::rdma::span_of(target, 0, 1 << 20), r, 0);
        c.close(); // dies mid-READ, never releases
        try {
            co_await std::move(reading);
        } catch (...) {
        }
        m.abort();
        EXPECT_TRUE(co_await eventually([&] { return link_stats().exports_held == held_before; }))
            << "the server still holds " << link_stats().exports_held - held_before << " exports";
        EXPECT_TRUE(co_await eventually([&] { return fx.server.stats().connections_open == 0; }));
        co_await fx.stop();
    });
}

} // namespace

namespace shoal::rpc_test {

/// The suite's transport here: RDMA on SHOAL_RDMA_IP, on the message path (the default of client
/// and server), each listener on a port of its own.
struct over_rdma {
    /// Runs `body` on a fresh engine of `smp` shards with RDMA started.
    static void run(std::function<future<>(rpc_env&)> body, unsigned smp = 1) {
        run_body(std::move(body), smp);
    }
};

INSTANTIATE_TYPED_TEST_SUITE_P(rpc_rdma, core_suite, ::testing::Types<over_rdma>);

} // namespace shoal::rpc_test
