// KV metrics on loopback: the command, hit/miss and byte counters and the request-latency
// histogram move for the requests the test sends.
#include "../core/metric_values.hh"
#include "../tcp/test_util.hh"
#include "core/future_util.hh"
#include "kv/server/metrics.hh"
#include "kv_test_util.hh"
#include "net/tcp/tcp.hh"

#include <chrono>
#include <string>

#include <gtest/gtest.h>

using namespace shoal;
using namespace std::chrono_literals;
using shoal::testing::metric_values;

TEST(kv_metrics, requests_move_their_counters_and_the_latency_histogram) {
    int rc = shoal::testing::run_in_shards(1, []() -> future<> {
        kv_test::test_server ts;
        co_await ts.start();
        auto group = kv::publish_metrics(ts.servers.local());
        auto v0 = metric_values();
        EXPECT_EQ(v0["shoal_kv_request_seconds_count"], 0);

        net::connected_socket s = co_await net::tcp::connect(ts.addr);
        auto in = s.input();
        auto out = s.output();
        const std::string requests = "set k 0 0 1\r\nx\r\nget k\r\nget nope\r\n";
        co_await out.write(requests);
        co_await out.close(); // the server answers, then sees the end
        std::string got = co_await with_timeout(steady_clock_type::now() + 10s, tcp_test::read_to_end(in));
        EXPECT_EQ(got, "STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\nEND\r\n");

        auto v1 = metric_values();
        EXPECT_EQ(v1["shoal_kv_cmd_set_total"], v0["shoal_kv_cmd_set_total"] + 1);
        EXPECT_EQ(v1["shoal_kv_cmd_get_total"], v0["shoal_kv_cmd_get_total"] + 2);
        EXPECT_EQ(v1["shoal_kv_get_hits_total"], v0["shoal_kv_get_hits_total"] + 1);
        EXPECT_EQ(v1["shoal_kv_get_misses_total"], v0["shoal_kv_get_misses_total"] + 1);
        EXPECT_EQ(v1["shoal_kv_read_bytes_total"], v0["shoal_kv_read_bytes_total"] + double(requests.size()));
        EXPECT_EQ(v1["shoal_kv_written_bytes_total"],
                  v0["shoal_kv_written_bytes_total"] + double(got.size()));
        // One read can bring all three requests or split them: one sample per read that had replies.
        EXPECT_GE(v1["shoal_kv_request_seconds_count"], 1);
        EXPECT_LE(v1["shoal_kv_request_seconds_count"], 3);
        EXPECT_GT(v1["shoal_kv_request_seconds_sum"], 0);
        group.clear();
        co_await ts.stop();
    });
    EXPECT_EQ(rc, 0);
}
