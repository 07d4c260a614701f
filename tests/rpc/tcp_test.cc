// The core RPC suite (rpc_suite.hh) over TCP on loopback, plus registration errors.

#include "rpc_suite.hh"

#include "support/patience.hh"
#include "support/run.hh"

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::rpc_test;

namespace {

rpc_env tcp_env() {
    return rpc_env{net::make_transport("tcp"), [] { return net::socket_address::parse("127.0.0.1:0"); }};
}

/// Runs suite case `name` on a fresh engine of `smp` shards.
void run_case(const char* name, unsigned smp = 1) {
    for (auto& [n, fn] : suite()) {
        if (std::string_view(n) == name) {
            auto body = fn;
            EXPECT_EQ(shoal::testing::run_in_shards(smp,
                                                    [body]() -> future<> {
                                                        rpc_env env = tcp_env();
                                                        co_await body(env);
                                                    }),
                      0);
            return;
        }
    }
    FAIL() << "no suite case " << name;
}

TEST(rpc_tcp, every_type_round_trips) {
    run_case("every_type_round_trips");
}
TEST(rpc_tcp, pipelined_calls_complete_out_of_order) {
    run_case("pipelined_calls_complete_out_of_order");
}
TEST(rpc_tcp, handler_exceptions_reach_the_caller) {
    run_case("handler_exceptions_reach_the_caller");
}
TEST(rpc_tcp, calls_time_out) {
    run_case("calls_time_out");
}
TEST(rpc_tcp, mismatched_calls_get_clear_errors) {
    run_case("mismatched_calls_get_clear_errors");
}
TEST(rpc_tcp, one_way_calls_run) {
    run_case("one_way_calls_run");
}
TEST(rpc_tcp, server_stop_fails_calls_in_flight) {
    run_case("server_stop_fails_calls_in_flight");
}
TEST(rpc_tcp, server_stop_drains_finishing_calls) {
    run_case("server_stop_drains_finishing_calls");
}
TEST(rpc_tcp, pool_reconnects_after_restart) {
    run_case("pool_reconnects_after_restart");
}
TEST(rpc_tcp, client_killed_mid_call) {
    run_case("client_killed_mid_call");
}
TEST(rpc_tcp, client_that_never_reads_is_bounded) {
    run_case("client_that_never_reads_is_bounded");
}
TEST(rpc_tcp, frame_size_limits) {
    run_case("frame_size_limits");
}
TEST(rpc_tcp, sharded_server_serves_every_shard) {
    run_case("sharded_server_serves_every_shard", 2);
}
TEST(rpc_tcp, in_flight_limits_hold_calls_back) {
    run_case("in_flight_limits_hold_calls_back");
}

TEST(rpc_tcp, every_suite_case_has_a_test) {
    EXPECT_EQ(suite().size(), 14u);
}

TEST(rpc_server, duplicate_verbs_are_refused_at_registration) {
    rpc::server s;
    s.register_handler<&add>();
    EXPECT_THROW(s.register_handler<&add>(), rpc::duplicate_verb_error);
    // Overloads share a qualified name, hence a verb id.
    s.register_handler<static_cast<int32_t (*)(int32_t)>(&versions::lookup)>();
    EXPECT_THROW((s.register_handler<static_cast<int32_t (*)(std::string)>(&versions::lookup)>()),
                 rpc::duplicate_verb_error);
    static_assert(rpc::function_name<&add>() == "shoal::rpc_test::add");
    static_assert(rpc::function_name<&gatekeeper::wait_here>() == "shoal::rpc_test::gatekeeper::wait_here");
}

TEST(rpc_client, calls_without_a_connection_fail_cleanly) {
    EXPECT_EQ(shoal::testing::run_in_shard([]() -> future<> {
                  rpc::client c(net::make_transport("tcp"));
                  try {
                      co_await c.call<&add>(1, 2);
                      ADD_FAILURE() << "no error";
                  } catch (const rpc::connection_error&) {
                  }
                  try {
                      // Nothing listens on this port of the loopback (bound and closed at once).
                      auto ss =
                          net::make_transport("tcp").listen(net::socket_address::parse("127.0.0.1:0"), {});
                      auto addr = ss.local_address();
                      ss.abort_accept();
                      ss = {};
                      co_await c.connect(addr);
                      ADD_FAILURE() << "connected to nothing";
                  } catch (const rpc::connection_error&) {
                  }
              }),
              0);
}

/// What a hostile server answers a call with.
struct hostile_answer {
    const char* name;
    std::function<net::temporary_buffer()> reply; // null: hang up instead
    const char* error;                            // in the call's error
};

/// The hostile server: reads one whole request, then answers as `a` says and hangs up.
future<> answer_once(net::server_socket& listener, const hostile_answer& a) {
    net::accept_result r = co_await listener.accept();
    net::connected_socket s = std::move(r.connection);
    net::input_stream in = s.input();
    net::output_stream out = s.output();
    net::temporary_buffer head = co_await in.read_exactly(rpc::frame_header::size);
    auto h = rpc::frame_header::decode(head.get(), 1 << 20);
    (void)co_await in.read_exactly(h.body_size());
    if (a.reply) {
        co_await out.write(a.reply());
        co_await out.flush();
    }
    co_await out.close();
}

/// A client's calls against a server that answers `a`.
future<> call_a_hostile_server(const hostile_answer& a) {
    auto tcp = net::make_transport("tcp");
    net::server_socket listener = tcp.listen(net::socket_address::parse("127.0.0.1:0"), {});
    future<> served = answer_once(listener, a);
    rpc::client c(tcp);
    co_await c.connect(listener.local_address());
    try {
        (void)co_await c.call<&add>(1, 2);
        ADD_FAILURE() << "the call succeeded";
    } catch (const rpc::connection_error& e) {
        EXPECT_NE(std::string(e.what()).find(a.error), std::string::npos) << e.what();
    }
    EXPECT_FALSE(c.connected());
    try {
        (void)co_await with_timeout(steady_clock_type::now() + patience, c.call<&add>(3, 4));
        ADD_FAILURE() << "a later call succeeded";
    } catch (const rpc::connection_error&) {
    }
    EXPECT_EQ(c.in_flight(), 0u);
    co_await c.close();
    co_await std::move(served);
    listener.abort_accept();
}

/// A server that answers a call with a frame no client may get (a request), with bytes that are
/// not a frame, or that hangs up: the pending call fails with a connection_error that says
/// which, and so does every later call, at once.
TEST(rpc_client, a_hostile_server_fails_calls_with_a_clear_error) {
    const std::vector<hostile_answer> answers = {
        {"a request frame",
         [] {
             auto f = rpc::make_frame(rpc::frame_type::request, int32_t(7));
             f.header.verb = rpc::verb_id<&add>;
             f.header.signature = rpc::signature_hash<&add>;
             f.header.encode(f.head.get_write());
             return std::move(f.head);
         },
         "protocol error from the server: a client received a request frame"},
        {"bytes that are not a frame",
         [] { return net::temporary_buffer::copy_of(std::string(rpc::frame_header::size, 'x')); },
         "protocol error from the server"},
        {"a hang-up", nullptr, "connection closed by the server"},
    };
    for (const hostile_answer& a : answers) {
        SCOPED_TRACE(a.name);
        EXPECT_EQ(shoal::testing::run_in_shard([&a] { return call_a_hostile_server(a); }), 0);
    }
}

} // namespace
