// The core RPC suite (rpc_suite.hh) over TCP on loopback, plus registration errors.

#include "rpc_suite.hh"

#include "../core/run_in_shards.hh"

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

TEST(rpc_tcp, every_suite_case_has_a_test) {
    EXPECT_EQ(suite().size(), 13u);
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

} // namespace
