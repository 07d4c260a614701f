#pragma once

// The core RPC suite, written once as a GoogleTest typed suite over the transport (`core_suite`)
// and instantiated over TCP on loopback (rpc_tcp_test, native) and over RDMA (rpc_rdma_test,
// Soft-RoCE guest). Each case is a coroutine that sets up its own server and clients and asserts
// outcomes, never the order of racing events; every wait is bounded.

#include "rpc_fixture.hh"

#include "core/future_util.hh"
#include "core/sharded.hh"
#include "core/timer.hh"
#include "net/rdma/connection.hh"
#include "rpc/client_pool.hh"
#include "support/patience.hh"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace shoal::rpc_test {

// ---- cases -----------------------------------------------------------------------------------

/// The suite, typed over a transport: `Transport::run(body, smp)` runs `body(env)` on a fresh
/// engine of `smp` shards, `env` on that transport. Each test binary instantiates it for its own
/// transport, with the transport's name as the prefix (`rpc_tcp/core_suite/0.calls_time_out`;
/// ctest's name for it is `rpc_tcp.calls_time_out<shoal::rpc_test::over_tcp>`).
template <typename Transport>
class core_suite : public ::testing::Test {};

TYPED_TEST_SUITE_P(core_suite);

/// Every type round-trips through a real call (random values), views and attachments included.
TYPED_TEST_P(core_suite, every_type_round_trips) {
    TypeParam::run([](rpc_env& env) -> future<> {
        fixture fx(env);
        co_await fx.client.connect(fx.address);
        std::mt19937_64 rng(7);
        for (int i = 0; i < 300; ++i) {
            everything v = random_everything(rng);
            everything back = co_await fx.client.call<&echo_everything>(v);
            EXPECT_EQ(back, v) << "call " << i;
        }
        std::string got = co_await fx.client.call<&echo_view>(std::string_view("hello rpc"));
        EXPECT_EQ(got, "hello rpc");
        std::string raw("\0\1\2\3", 4);
        std::vector<std::byte> bytes = co_await fx.client.call<&echo_bytes>(
            rpc::bytes_view(reinterpret_cast<const std::byte*>(raw.data()), raw.size()));
        EXPECT_EQ(bytes.size(), 4u);
        EXPECT_EQ(bytes[3], std::byte{3});
        for (size_t size : {size_t(0), size_t(1), size_t(100000), size_t(3) << 20}) {
            std::string payload(size, '\0');
            for (size_t k = 0; k < size; ++k) {
                payload[k] = char(k * 31 + size);
            }
            rpc::attachment a = co_await fx.client.call<&echo_attachment>(
                rpc::attachment(net::temporary_buffer::copy_of(payload)));
            EXPECT_TRUE(a.view() == payload) << "attachment of " << size;
        }
        // (GCC 12 cannot keep array temporaries, such as an initializer list, alive across
        // co_await: build arguments first.)
        std::vector<std::string> words{"1", "2", "3", "4"};
        size_t n = co_await fx.client.call<&sizes>(
            std::string("abc"), rpc::attachment(net::temporary_buffer::copy_of("xy")), words);
        EXPECT_EQ(n, 3u + 2u + 4u);
        std::string joined =
            co_await fx.client.call<&coroutine_concat>(std::string("co"), std::string("routine"));
        EXPECT_EQ(joined, "coroutine");
        co_await fx.stop();
    });
}

/// 10,000 calls pipelined on one connection, answered out of order (random handler delays).
TYPED_TEST_P(core_suite, pipelined_calls_complete_out_of_order) {
    TypeParam::run([](rpc_env& env) -> future<> {
        fixture fx(env);
        co_await fx.client.connect(fx.address);
        constexpr uint64_t n = 10000;
        std::vector<uint64_t> order;
        order.reserve(n);
        std::vector<future<>> calls;
        std::mt19937 rng(11);
        uint64_t wrong = 0;
        for (uint64_t i = 0; i < n; ++i) {
            calls.push_back(fx.client.call<&later_double>(i, uint32_t(rng() % 2000))
                                .then([i, &order, &wrong](uint64_t r) {
                                    if (r != i * 2) {
                                        ++wrong;
                                    }
                                    order.push_back(i);
                                }));
        }
        co_await when_all_succeed(std::move(calls));
        EXPECT_EQ(wrong, 0u);
        EXPECT_EQ(order.size(), n);
        uint64_t inversions = 0;
        for (size_t k = 1; k < order.size(); ++k) {
            inversions += order[k] < order[k - 1];
        }
        EXPECT_GT(inversions, 0u) << "replies came back strictly in call order";
        co_await fx.stop();
    });
}

/// Exceptions of handlers reach the caller as remote_error with type and message; the
/// connection stays usable.
TYPED_TEST_P(core_suite, handler_exceptions_reach_the_caller) {
    TypeParam::run([](rpc_env& env) -> future<> {
        fixture fx(env);
        co_await fx.client.connect(fx.address);
        try {
            co_await fx.client.call<&throws_invalid>(std::string("no such thing"));
            ADD_FAILURE() << "no exception";
        } catch (const rpc::remote_error& e) {
            EXPECT_EQ(e.type_name(), "std::invalid_argument");
            EXPECT_STREQ(e.what(), "no such thing");
        }
        try {
            co_await fx.client.call<&fails_later>();
            ADD_FAILURE() << "no exception";
        } catch (const rpc::remote_error& e) {
            EXPECT_EQ(e.type_name(), "shoal::rpc_test::custom_failure");
            EXPECT_STREQ(e.what(), "it broke");
        }
        EXPECT_EQ(co_await fx.client.call<&add>(2, 3), 5);
        co_await fx.stop();
    });
}

/// A call past its deadline fails with timeout_error; the late reply is dropped and the
/// connection keeps working.
TYPED_TEST_P(core_suite, calls_time_out) {
    TypeParam::run([](rpc_env& env) -> future<> {
        fixture fx(env);
        co_await fx.client.connect(fx.address);
        auto start = steady_clock_type::now();
        try {
            co_await fx.client.call_for<&gatekeeper::wait_here>(50ms, 1);
            ADD_FAILURE() << "no timeout";
        } catch (const rpc::timeout_error&) {
        }
        EXPECT_GE(steady_clock_type::now() - start, 50ms);
        fx.keeper.release(); // the late reply arrives and is dropped
        EXPECT_EQ(co_await fx.client.call<&add>(20, 22), 42);
        EXPECT_EQ(fx.client.in_flight(), 0u);
        co_await fx.stop();
    });
}

/// A caller whose declaration differs from the server's gets signature_mismatch_error; an
/// unregistered verb gets unknown_verb_error; neither breaks the connection.
TYPED_TEST_P(core_suite, mismatched_calls_get_clear_errors) {
    TypeParam::run([](rpc_env& env) -> future<> {
        fixture fx(env);
        co_await fx.client.connect(fx.address);
        static_assert(rpc::verb_id<static_cast<int32_t (*)(int32_t)>(&versions::lookup)> ==
                      rpc::verb_id<static_cast<int32_t (*)(std::string)>(&versions::lookup)>);
        EXPECT_EQ(co_await fx.client.call<static_cast<int32_t (*)(int32_t)>(&versions::lookup)>(41), 42);
        try {
            co_await fx.client.call<static_cast<int32_t (*)(std::string)>(&versions::lookup)>(
                std::string("key"));
            ADD_FAILURE() << "no exception";
        } catch (const rpc::signature_mismatch_error& e) {
            EXPECT_NE(std::string(e.what()).find("versions::lookup"), std::string::npos) << e.what();
        }
        try {
            co_await fx.client.call<&not_registered>(1);
            ADD_FAILURE() << "no exception";
        } catch (const rpc::unknown_verb_error&) {
        }
        EXPECT_EQ(co_await fx.client.call<&add>(1, 1), 2);
        co_await fx.stop();
    });
}

/// One-way calls run without a reply, in order with later calls of the same connection.
TYPED_TEST_P(core_suite, one_way_calls_run) {
    TypeParam::run([](rpc_env& env) -> future<> {
        fixture fx(env);
        co_await fx.client.connect(fx.address);
        for (unsigned i = 1; i <= 100; ++i) {
            co_await fx.client.send<&gatekeeper::hit>(i);
        }
        EXPECT_EQ(co_await fx.client.call<&gatekeeper::hits>(), 5050u);
        co_await fx.stop();
    });
}

/// stop() with calls in flight whose handlers never finish: it returns (a hang fails the test
/// binary's timeout), having aborted the connection at its deadline, and every caller gets
/// connection_error.
TYPED_TEST_P(core_suite, server_stop_fails_calls_in_flight) {
    TypeParam::run([](rpc_env& env) -> future<> {
        rpc::server_options so;
        so.stop_timeout = 200ms;
        fixture fx(env, so);
        co_await fx.client.connect(fx.address);
        std::vector<future<int>> calls;
        for (int i = 0; i < 50; ++i) {
            calls.push_back(fx.client.call<&gatekeeper::wait_here>(i));
        }
        bool all_in = co_await eventually([&] { return fx.keeper.waiting.size() == 50; });
        EXPECT_TRUE(all_in);
        co_await fx.server.stop();
        // The handlers never finished: the connection was aborted at the deadline, and every serve
        // function has returned when stop() does.
        EXPECT_EQ(fx.server.stats().connections_aborted, 1u);
        EXPECT_EQ(fx.server.stats().connections_open, 0u);
        unsigned failed = 0;
        for (auto& f : calls) {
            try {
                co_await std::move(f);
            } catch (const rpc::connection_error&) {
                ++failed;
            }
        }
        EXPECT_EQ(failed, 50u);
        EXPECT_FALSE(fx.client.connected());
        try {
            co_await fx.client.call<&add>(1, 2);
            ADD_FAILURE() << "a call on a dead connection succeeded";
        } catch (const rpc::connection_error&) {
        }
        fx.keeper.release(); // late replies go nowhere
        co_await yield();
        co_await fx.client.close();
    });
}

/// A graceful stop lets calls that finish in time reply.
TYPED_TEST_P(core_suite, server_stop_drains_finishing_calls) {
    TypeParam::run([](rpc_env& env) -> future<> {
        rpc::server_options so;
        so.stop_timeout = patience; // the drain is the subject, not its deadline
        fixture fx(env, so);
        co_await fx.client.connect(fx.address);
        std::vector<future<uint64_t>> calls;
        // 200 ms handlers: all 20 are running before the first finishes even where one message per
        // call is dispatched slowly (the RDMA message path in an ASan guest), and stop's drain lets
        // them reply.
        for (uint64_t i = 0; i < 20; ++i) {
            calls.push_back(fx.client.call<&later_double>(i, 200000));
        }
        bool running = co_await eventually([&] { return fx.server.stats().calls_in_flight == 20; });
        EXPECT_TRUE(running);
        co_await fx.server.stop();
        for (uint64_t i = 0; i < 20; ++i) {
            EXPECT_EQ(co_await std::move(calls[i]), i * 2);
        }
        co_await fx.client.close();
    });
}

/// A pool reconnects (with back-off) once the server is back on the same address.
TYPED_TEST_P(core_suite, pool_reconnects_after_restart) {
    TypeParam::run([](rpc_env& env) -> future<> {
        gatekeeper keeper;
        auto first = std::make_unique<rpc::server>(env.transport);
        register_all(*first, &keeper);
        first->listen(env.next_address());
        auto address = first->local_address();
        rpc::pool_options po;
        po.connections = 3;
        po.backoff_min = 5ms;
        po.backoff_max = 50ms;
        rpc::client_pool pool(env.transport, address, po);
        for (int i = 0; i < 10; ++i) {
            EXPECT_EQ(co_await pool.call<&add>(i, 1), i + 1);
        }
        co_await first->stop();
        first.reset();
        unsigned failures = 0;
        for (int i = 0; i < 5; ++i) {
            try {
                co_await pool.call<&add>(1, 1);
            } catch (const rpc::connection_error&) {
                ++failures;
            }
        }
        EXPECT_EQ(failures, 5u);
        rpc::server second(env.transport);
        register_all(second, &keeper);
        second.listen(address);
        bool back = false;
        auto deadline = steady_clock_type::now() + patience;
        while (!back && steady_clock_type::now() < deadline) {
            bool refused = false;
            try {
                back = co_await pool.call<&add>(2, 2) == 4;
            } catch (const rpc::connection_error&) {
                refused = true;
            }
            if (refused) {
                co_await sleep(5ms);
            }
        }
        EXPECT_TRUE(back) << "the pool never reconnected";
        // Every connection of the pool comes back, and calls spread over them.
        for (int i = 0; i < 30; ++i) {
            EXPECT_EQ(co_await pool.call<&add>(i, i), 2 * i);
        }
        // The other connections come back on later calls, once their back-off has passed.
        auto until = steady_clock_type::now() + patience;
        while (second.stats().connections_open < 3 && steady_clock_type::now() < until) {
            EXPECT_EQ(co_await pool.call<&add>(1, 2), 3);
            co_await sleep(1ms);
        }
        EXPECT_EQ(second.stats().connections_open, 3u);
        EXPECT_EQ(pool.connected(), 3u);
        co_await pool.close();
        co_await second.stop();
    });
}

/// A client that disappears mid-call: the server finishes the call, drops its reply and frees
/// the connection's state.
TYPED_TEST_P(core_suite, client_killed_mid_call) {
    TypeParam::run([](rpc_env& env) -> future<> {
        fixture fx(env);
        rpc::client doomed(env.transport);
        co_await doomed.connect(fx.address);
        auto call = doomed.call<&gatekeeper::wait_here>(5);
        bool started = co_await eventually([&] { return fx.keeper.waiting.size() == 1; });
        EXPECT_TRUE(started);
        EXPECT_EQ(fx.server.stats().connections_open, 1u);
        doomed.abort();
        try {
            co_await std::move(call);
            ADD_FAILURE() << "a call on an aborted client succeeded";
        } catch (const rpc::connection_error&) {
        }
        fx.keeper.release();
        bool freed = co_await eventually([&] {
            return fx.server.stats().connections_open == 0 && fx.server.stats().calls_in_flight == 0;
        });
        EXPECT_TRUE(freed) << fx.server.stats().connections_open << " open, "
                           << fx.server.stats().calls_in_flight << " in flight";
        co_await fx.server.stop();
    });
}

/// A client that sends calls but never reads the replies: the server stops reading it once
/// max_queued_reply_bytes are queued, so its memory stays bounded; other clients are served.
TYPED_TEST_P(core_suite, client_that_never_reads_is_bounded) {
    TypeParam::run([](rpc_env& env) -> future<> {
        rpc::server_options so;
        so.max_queued_reply_bytes = 1 << 20;
        so.stop_timeout = 200ms;
        fixture fx(env, so);
        constexpr uint32_t reply_size = 256 << 10;
        // The raw client speaks what the server does: frames on the byte stream (TCP), or one frame
        // per message (the RDMA message path).
        const bool messages = env.transport.name == "rdma";
        net::connected_socket raw;
        std::shared_ptr<net::output_stream> out;
        std::shared_ptr<net::message_connection> msgs;
        if (messages) {
            auto c = co_await net::rdma::connect_rc(fx.address);
            msgs = std::make_shared<net::message_connection>(c.messages());
        } else {
            raw = co_await env.transport.connect(fx.address);
            // The stream outlives this coroutine's wait: a write still pending at the end fails once
            // the socket is aborted, and its continuation keeps the stream alive until then.
            out = std::make_shared<net::output_stream>(raw.output());
        }
        unsigned sent = 0;
        // Requests take room too, so the stream fills sooner (one message each over RDMA: under the
        // receive buffer size of the RDMA tests, 16 KiB).
        std::string filler(messages ? 8 << 10 : 32 << 10, 'f');
        for (; sent < 100000; ++sent) {
            auto f = rpc::make_frame(rpc::frame_type::request, reply_size, filler);
            f.header.verb = rpc::verb_id<&big_reply>;
            f.header.signature = rpc::signature_hash<&big_reply>;
            f.header.request_id = sent;
            f.header.encode(f.head.get_write());
            auto wrote =
                messages
                    ? msgs->send(std::move(f.head)).finally([msgs] {})
                    : out->write(std::move(f.head)).then([out] { return out->flush(); }).finally([out] {});
            // A write that waits while the server still reads only waits for a slow server (a busy
            // host): wait for it. Once the server has queued max_queued_reply_bytes for us it stops
            // reading, and a write still waiting 500 ms after that never completes.
            const auto waiting_since = steady_clock_type::now();
            while (!wrote.available() && steady_clock_type::now() - waiting_since < patience &&
                   !(fx.server.stats().max_queued_reply_bytes >= so.max_queued_reply_bytes &&
                     steady_clock_type::now() - waiting_since >= 500ms)) {
                co_await sleep(5ms);
            }
            if (!wrote.available()) {
                EXPECT_GE(fx.server.stats().max_queued_reply_bytes, so.max_queued_reply_bytes)
                    << "a write waited although the server had not stopped reading";
                (void)std::move(wrote).then_wrapped([](future<> f) { f.ignore_ready_future(); });
                break; // the server no longer reads us
            }
            co_await std::move(wrote);
        }
        EXPECT_LT(sent, 100000u) << "the server read every request of a client that reads nothing";
        auto st = fx.server.stats();
        EXPECT_LE(st.max_queued_reply_bytes, so.max_queued_reply_bytes + reply_size + 4096);
        EXPECT_LT(st.calls, sent);
        // Another client is still served.
        co_await fx.client.connect(fx.address);
        EXPECT_EQ(co_await fx.client.call<&add>(3, 4), 7);
        // stop() ends although that client still reads nothing (its connection is aborted after
        // stop_timeout; a hang fails the test binary's timeout).
        co_await fx.stop();
        // Every serve function has returned. Only the client that reads nothing may have missed the
        // drain deadline (then its blocked reply writes were broken by the abort); whether it did
        // depends on how much the kernel buffers took, so both outcomes are allowed.
        EXPECT_LE(fx.server.stats().connections_aborted, 1u);
        EXPECT_EQ(fx.server.stats().connections_open, 0u);
        if (messages) {
            msgs->abort();
        } else {
            raw.abort();
        }
    });
}

/// Frames over the server's limit close that connection (its calls fail); a call over the
/// client's own limit fails at once with protocol_error.
TYPED_TEST_P(core_suite, frame_size_limits) {
    TypeParam::run([](rpc_env& env) -> future<> {
        rpc::server_options so;
        so.max_frame_size = 64 << 10;
        rpc::client_options co;
        co.max_frame_size = 1 << 20;
        fixture fx(env, so, co);
        co_await fx.client.connect(fx.address);
        // (GCC 12 cannot take a member of a co_await expression in a template: a local first.)
        std::string echoed = co_await fx.client.call<&echo_view>(std::string(1000, 'a'));
        EXPECT_EQ(echoed.size(), 1000u);
        try {
            co_await fx.client.call<&echo_view>(std::string(2 << 20, 'a'));
            ADD_FAILURE() << "no error";
        } catch (const rpc::protocol_error&) {
        }
        EXPECT_TRUE(fx.client.connected());
        try {
            co_await fx.client.call<&echo_view>(std::string(100 << 10, 'a'));
            ADD_FAILURE() << "no error";
        } catch (const rpc::connection_error&) {
        }
        EXPECT_EQ(fx.server.stats().protocol_errors, 1u);
        co_await fx.stop();
    });
}

/// `sharded<rpc::server>`: every shard serves; each call runs on the shard owning its
/// connection.
TYPED_TEST_P(core_suite, sharded_server_serves_every_shard) {
    TypeParam::run(
        [](rpc_env& env) -> future<> {
            sharded<rpc::server> servers;
            co_await servers.start(env.transport, rpc::server_options{});
            auto address = env.next_address();
            co_await servers.invoke_on_all([](rpc::server& s) { s.register_handler<&which_shard, &add>(); });
            co_await servers.invoke_on(0, [&address](rpc::server& s) {
                s.listen(address);
                address = s.local_address();
            });
            co_await servers.invoke_on_all([address](rpc::server& s) {
                if (this_shard_id() != 0) {
                    s.listen(address);
                }
            });
            std::vector<rpc::client> clients;
            std::vector<unsigned> seen(shard_count(), 0);
            for (int i = 0; i < 16; ++i) {
                clients.emplace_back(env.transport);
                co_await clients.back().connect(address);
                unsigned shard = co_await clients.back().call<&which_shard>();
                EXPECT_EQ(co_await clients.back().call<&which_shard>(), shard) << "a connection moved";
                ++seen.at(shard);
            }
            for (unsigned s = 0; s < shard_count(); ++s) {
                EXPECT_GT(seen[s], 0u) << "shard " << s << " served no connection";
            }
            uint64_t accepted = co_await servers.map_reduce(
                [](rpc::server& s) { return s.stats().connections_accepted; }, uint64_t(0), std::plus<>());
            EXPECT_EQ(accepted, 16u);
            for (auto& c : clients) {
                co_await c.close();
            }
            co_await servers.stop();
        },
        2);
}

/// The per-connection and per-server in-flight limits: requests past them wait unread (the
/// server pauses the connection) and start as running calls finish; none is lost, and no more
/// run at once than the limits allow.
TYPED_TEST_P(core_suite, in_flight_limits_hold_calls_back) {
    TypeParam::run([](rpc_env& env) -> future<> {
        rpc::server_options so;
        so.max_in_flight_per_connection = 4;
        so.max_in_flight = 6;
        fixture fx(env, so);
        rpc::client second(env.transport);
        co_await fx.client.connect(fx.address);
        co_await second.connect(fx.address);
        std::vector<future<int>> calls;
        for (int i = 0; i < 10; ++i) {
            calls.push_back(fx.client.call<&gatekeeper::wait_here>(i));
        }
        EXPECT_TRUE(co_await eventually([&] { return fx.keeper.waiting.size() == 4; }))
            << fx.keeper.waiting.size() << " calls of one connection run";
        co_await sleep(50ms); // (time for a fifth to start if the limit did not hold)
        EXPECT_EQ(fx.keeper.waiting.size(), 4u) << "the per-connection limit (4) did not hold";
        for (int i = 0; i < 10; ++i) {
            calls.push_back(second.call<&gatekeeper::wait_here>(100 + i));
        }
        EXPECT_TRUE(co_await eventually([&] { return fx.keeper.waiting.size() == 6; }))
            << fx.keeper.waiting.size() << " calls of two connections run";
        co_await sleep(50ms);
        EXPECT_EQ(fx.keeper.waiting.size(), 6u) << "the server's limit (6) did not hold";
        EXPECT_EQ(fx.server.stats().calls, 6u);
        // Release whatever runs, round by round, until every call has its reply.
        auto all_replied = [&] {
            for (auto& c : calls) {
                if (!c.available()) {
                    return false;
                }
            }
            return true;
        };
        size_t most = 0;
        for (int round = 0; round < 40 && !all_replied(); ++round) {
            fx.keeper.release();
            (void)co_await eventually([&] { return all_replied() || !fx.keeper.waiting.empty(); });
            most = std::max(most, fx.keeper.waiting.size());
        }
        EXPECT_TRUE(all_replied()) << "calls held back were never served";
        EXPECT_LE(most, 6u);
        for (int i = 0; i < 20; ++i) {
            EXPECT_EQ(co_await std::move(calls[i]), i < 10 ? i : 100 + (i - 10));
        }
        EXPECT_EQ(fx.server.stats().calls, 20u);
        co_await second.close();
        co_await fx.stop();
    });
}

REGISTER_TYPED_TEST_SUITE_P(core_suite, every_type_round_trips, pipelined_calls_complete_out_of_order,
                            handler_exceptions_reach_the_caller, calls_time_out,
                            mismatched_calls_get_clear_errors, one_way_calls_run,
                            server_stop_fails_calls_in_flight, server_stop_drains_finishing_calls,
                            pool_reconnects_after_restart, client_killed_mid_call,
                            client_that_never_reads_is_bounded, frame_size_limits,
                            sharded_server_serves_every_shard, in_flight_limits_hold_calls_back);

} // namespace shoal::rpc_test
