// The core RPC suite (rpc_suite.hh) over RDMA streams: run in the Soft-RoCE guest (label rdma),
// binding and connecting to SHOAL_RDMA_IP.

#include "rpc_suite.hh"

#include "../rdma/rdma_test_util.hh"

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::rpc_test;

namespace {

/// Runs suite case `name` on a fresh engine of `smp` shards with RDMA started.
void run_case(const char* name, unsigned smp = 1) {
    for (auto& [n, fn] : suite()) {
        if (std::string_view(n) == name) {
            auto body = fn;
            EXPECT_EQ(rdma_test::run_rdma(smp,
                                          [body]() -> future<> {
                                              rpc_env env{net::make_transport("rdma"), [] {
                                                              return rdma_test::addr(rdma_test::next_port());
                                                          }};
                                              co_await body(env);
                                          }),
                      0);
            return;
        }
    }
    FAIL() << "no suite case " << name;
}

TEST(rpc_rdma, every_type_round_trips) {
    run_case("every_type_round_trips");
}
TEST(rpc_rdma, pipelined_calls_complete_out_of_order) {
    run_case("pipelined_calls_complete_out_of_order");
}
TEST(rpc_rdma, handler_exceptions_reach_the_caller) {
    run_case("handler_exceptions_reach_the_caller");
}
TEST(rpc_rdma, calls_time_out) {
    run_case("calls_time_out");
}
TEST(rpc_rdma, mismatched_calls_get_clear_errors) {
    run_case("mismatched_calls_get_clear_errors");
}
TEST(rpc_rdma, one_way_calls_run) {
    run_case("one_way_calls_run");
}
TEST(rpc_rdma, server_stop_fails_calls_in_flight) {
    run_case("server_stop_fails_calls_in_flight");
}
TEST(rpc_rdma, server_stop_drains_finishing_calls) {
    run_case("server_stop_drains_finishing_calls");
}
TEST(rpc_rdma, pool_reconnects_after_restart) {
    run_case("pool_reconnects_after_restart");
}
TEST(rpc_rdma, client_killed_mid_call) {
    run_case("client_killed_mid_call");
}
TEST(rpc_rdma, client_that_never_reads_is_bounded) {
    run_case("client_that_never_reads_is_bounded");
}
TEST(rpc_rdma, frame_size_limits) {
    run_case("frame_size_limits");
}
TEST(rpc_rdma, sharded_server_serves_every_shard) {
    run_case("sharded_server_serves_every_shard", 2);
}

} // namespace
