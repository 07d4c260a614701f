// RDMA metrics in the Soft-RoCE guest: the shoal_rdma_* series are absent until RDMA starts on
// the shard, then follow the shard's real context (pool, connections, sends, completions).
#include "core/coroutine.hh"
#include "core/metrics.hh"
#include "net/rdma/metrics.hh"
#include "rdma_test_util.hh"

#include <map>
#include <string>

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::rdma_test;

namespace {

/// Shard 0's value of every collected counter and gauge, by name.
std::map<std::string, double> values() {
    std::map<std::string, double> out;
    for (const auto& f : metrics::collect_local()) {
        for (const auto& s : f.samples) {
            out[f.name] = s.value;
        }
    }
    return out;
}

} // namespace

TEST(rdma_metrics, absent_until_rdma_starts) {
    smp_options so;
    so.smp = 1;
    so.pin = false;
    int rc = run_shards(so, []() -> future<int> {
        auto group = rdma::publish_metrics();
        EXPECT_GT(group.size(), 20u);
        for (const auto& [name, v] : values()) {
            EXPECT_FALSE(name.starts_with("shoal_rdma_")) << name << " without RDMA";
        }
        co_return 0;
    });
    EXPECT_EQ(rc, 0);
}

TEST(rdma_metrics, follow_the_shards_context) {
    int rc = run_rdma(1, []() -> future<> {
        auto group = rdma::publish_metrics();
        auto before = values();
        EXPECT_GT(before["shoal_rdma_pool_registered_bytes"], 0);
        EXPECT_GT(before["shoal_rdma_pool_regions"], 0);
        EXPECT_EQ(before["shoal_rdma_connections"], 0);
        EXPECT_GT(before["shoal_rdma_srq_posted"], 0);

        const auto a = addr(next_port());
        net::server_socket ss = rdma::listen(a);
        auto accepted = ss.accept();
        net::connected_socket client = co_await rdma::connect(a);
        net::accept_result server_side = co_await std::move(accepted);
        auto connected = values();
        EXPECT_EQ(connected["shoal_rdma_connections"], 2); // both ends live on this shard
        EXPECT_GT(connected["shoal_rdma_cm_events_total"], before["shoal_rdma_cm_events_total"]);

        net::output_stream out = client.output();
        net::input_stream in = server_side.connection.input();
        co_await out.write("ping");
        co_await out.flush();
        net::temporary_buffer got = co_await in.read_exactly(4);
        EXPECT_EQ(std::string_view(got.get(), got.size()), "ping");
        auto after = values();
        EXPECT_GT(after["shoal_rdma_send_requests_total"], connected["shoal_rdma_send_requests_total"]);
        EXPECT_GT(after["shoal_rdma_post_send_calls_total"], connected["shoal_rdma_post_send_calls_total"]);
        EXPECT_GT(after["shoal_rdma_completions_total"], connected["shoal_rdma_completions_total"]);
        EXPECT_GT(after["shoal_rdma_cq_polls_total"], before["shoal_rdma_cq_polls_total"]);

        client.abort();
        server_side.connection.abort();
        ss.abort_accept();
    });
    EXPECT_EQ(rc, 0);
}
