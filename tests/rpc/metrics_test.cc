// RPC client and server metrics over TCP on loopback: each counter and histogram moves for the
// calls, errors and timeouts the test makes.

#include "rpc/client_stats.hh"
#include "rpc/metrics.hh"
#include "rpc_fixture.hh"

#include "../core/metric_values.hh"
#include "support/run.hh"

#include <string>

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::rpc_test;

namespace {

using shoal::testing::metric_values;

rpc_env tcp_env() {
    return rpc_env{net::make_transport("tcp"), [] { return net::socket_address::parse("127.0.0.1:0"); }};
}

} // namespace

TEST(rpc_metrics, calls_errors_timeouts_and_latencies_are_counted) {
    int rc = shoal::testing::run_in_shard([]() -> future<> {
        rpc_env env = tcp_env();
        fixture fx(env);
        auto client_group = rpc::publish_client_metrics();
        auto server_group = rpc::publish_metrics(fx.server);
        co_await fx.client.connect(fx.address);
        auto v0 = metric_values();

        for (int i = 0; i < 10; ++i) {
            EXPECT_EQ(co_await fx.client.call<&add>(i, 1), i + 1);
        }
        auto v1 = metric_values();
        EXPECT_EQ(v1["shoal_rpc_client_calls_total"], v0["shoal_rpc_client_calls_total"] + 10);
        EXPECT_EQ(v1["shoal_rpc_client_replies_total"], v0["shoal_rpc_client_replies_total"] + 10);
        EXPECT_EQ(v1["shoal_rpc_client_errors_total"], v0["shoal_rpc_client_errors_total"]);
        EXPECT_EQ(v1["shoal_rpc_client_call_seconds_count"], v0["shoal_rpc_client_call_seconds_count"] + 10);
        EXPECT_GT(v1["shoal_rpc_client_call_seconds_sum"], v0["shoal_rpc_client_call_seconds_sum"]);
        EXPECT_GT(v1["shoal_rpc_client_sent_bytes_total"], v0["shoal_rpc_client_sent_bytes_total"] + 10 * 8);
        EXPECT_EQ(v1["shoal_rpc_server_handler_seconds_count"],
                  v0["shoal_rpc_server_handler_seconds_count"] + 10);
        EXPECT_EQ(v1["shoal_rpc_client_calls_in_flight"], 0);

        // A handler that throws: an error reply, timed on both sides.
        try {
            co_await fx.client.call<&throws_invalid>(std::string("no"));
            ADD_FAILURE() << "no exception";
        } catch (const std::exception&) {
        }
        auto v2 = metric_values();
        EXPECT_EQ(v2["shoal_rpc_client_errors_total"], v1["shoal_rpc_client_errors_total"] + 1);
        EXPECT_EQ(v2["shoal_rpc_client_replies_total"], v1["shoal_rpc_client_replies_total"] + 1);
        EXPECT_EQ(v2["shoal_rpc_server_error_replies_total"], v1["shoal_rpc_server_error_replies_total"] + 1);
        EXPECT_EQ(v2["shoal_rpc_server_handler_seconds_count"],
                  v1["shoal_rpc_server_handler_seconds_count"] + 1);

        // A call held by the server past its deadline: in flight, then a timeout.
        // (Long enough to be seen in flight first; should a busy host stall this shard past it
        // before the look, the call is no longer in flight and only the timeout is checked.)
        auto held = fx.client.call_for<&gatekeeper::wait_here>(500ms, 1);
        co_await yield();
        if (!held.available()) {
            EXPECT_EQ(metric_values()["shoal_rpc_client_calls_in_flight"], 1);
        }
        try {
            co_await std::move(held);
            ADD_FAILURE() << "no timeout";
        } catch (const rpc::timeout_error&) {
        }
        auto v3 = metric_values();
        EXPECT_EQ(v3["shoal_rpc_client_timeouts_total"], v2["shoal_rpc_client_timeouts_total"] + 1);
        EXPECT_EQ(v3["shoal_rpc_client_errors_total"], v2["shoal_rpc_client_errors_total"] + 1);
        EXPECT_EQ(v3["shoal_rpc_client_call_seconds_count"], v2["shoal_rpc_client_call_seconds_count"])
            << "a timed-out call has no latency sample";
        EXPECT_EQ(v3["shoal_rpc_client_calls_in_flight"], 0);

        // One-way calls.
        co_await fx.client.send<&gatekeeper::hit>(1u);
        EXPECT_EQ(metric_values()["shoal_rpc_client_one_way_total"],
                  v3["shoal_rpc_client_one_way_total"] + 1);
        co_await fx.stop();
    });
    EXPECT_EQ(rc, 0);
}
