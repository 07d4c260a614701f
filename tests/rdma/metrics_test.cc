// RDMA metrics in the Soft-RoCE guest: the shoal_rdma_* series are absent until RDMA starts on
// the shard, then follow the shard's real context (pool, connections, sends, completions,
// completions by opcode and errors by status, credit stalls, per-class pool bytes, watermark
// refusals).
#include "../core/metric_values.hh"
#include "core/coroutine.hh"
#include "core/metrics.hh"
#include "net/rdma/metrics.hh"
#include "rdma_test_util.hh"

#include "core/timer.hh"

#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::rdma_test;

namespace {

using shoal::testing::metric_values;

} // namespace

TEST(rdma_metrics, absent_until_rdma_starts) {
    int rc = shoal::testing::run_in_shard([]() -> future<> {
        auto group = rdma::publish_metrics();
        EXPECT_GT(group.size(), 20u);
        for (const auto& [name, v] : metric_values()) {
            EXPECT_FALSE(name.starts_with("shoal_rdma_")) << name << " without RDMA";
        }
        co_return;
    });
    EXPECT_EQ(rc, 0);
}

TEST(rdma_metrics, follow_the_shards_context) {
    int rc = run_rdma(1, []() -> future<> {
        auto group = rdma::publish_metrics();
        auto before = metric_values();
        EXPECT_GT(before["shoal_rdma_pool_registered_bytes"], 0);
        EXPECT_GT(before["shoal_rdma_pool_regions"], 0);
        EXPECT_EQ(before["shoal_rdma_connections"], 0);
        EXPECT_GT(before["shoal_rdma_srq_posted"], 0);

        const auto a = addr(next_port());
        net::server_socket ss = rdma::listen(a);
        auto accepted = ss.accept();
        net::connected_socket client = co_await rdma::connect(a);
        net::accept_result server_side = co_await std::move(accepted);
        auto connected = metric_values();
        EXPECT_EQ(connected["shoal_rdma_connections"], 2); // both ends live on this shard
        EXPECT_GT(connected["shoal_rdma_cm_events_total"], before["shoal_rdma_cm_events_total"]);

        net::output_stream out = client.output();
        net::input_stream in = server_side.connection.input();
        co_await out.write("ping");
        co_await out.flush();
        net::temporary_buffer got = co_await in.read_exactly(4);
        EXPECT_EQ(std::string_view(got.get(), got.size()), "ping");
        auto after = metric_values();
        EXPECT_GT(after["shoal_rdma_send_requests_total"], connected["shoal_rdma_send_requests_total"]);
        EXPECT_GT(after["shoal_rdma_post_send_calls_total"], connected["shoal_rdma_post_send_calls_total"]);
        EXPECT_GT(after["shoal_rdma_completions_total"], connected["shoal_rdma_completions_total"]);
        EXPECT_GT(after["shoal_rdma_cq_polls_total"], before["shoal_rdma_cq_polls_total"]);
        EXPECT_GT(after["shoal_rdma_completions_by_opcode_total{opcode=recv}"],
                  connected["shoal_rdma_completions_by_opcode_total{opcode=recv}"]);

        client.abort();
        server_side.connection.abort();
        ss.abort_accept();
    });
    EXPECT_EQ(rc, 0);
}

TEST(rdma_metrics, completions_by_opcode_errors_by_status_and_pool_classes) {
    int rc = run_rdma(1, []() -> future<> {
        auto group = rdma::publish_metrics();
        auto& ctx = rdma::shard_context::local();
        const auto a = addr(next_port());
        rdma::buffer mem = ctx.pool().allocate(65536);
        rdma::exported_region exported =
            rdma::export_region(mem, rdma::access::remote_read | rdma::access::remote_write);
        rdma::listen_options lo;
        lo.connection = ctx.opts().connection;
        lo.connection->region = exported.descriptor();
        rdma::listener l = rdma::listen_rc(a, lo);
        auto accepted = l.accept();
        rdma::connection c = co_await rdma::connect_rc(a);
        rdma::connection server_side = co_await std::move(accepted);
        const rdma::remote_region rr = *c.peer_region();

        auto before = metric_values();
        EXPECT_EQ(before["shoal_rdma_completion_errors_total{status=rem_access_err}"], 0);
        // A 3000-byte buffer comes from the 4096-byte class.
        rdma::buffer local = ctx.pool().allocate(3000);
        auto held = metric_values();
        EXPECT_EQ(held["shoal_rdma_pool_class_in_use_bytes{class=4096}"],
                  before["shoal_rdma_pool_class_in_use_bytes{class=4096}"] + 4096);
        EXPECT_EQ(held.count("shoal_rdma_pool_class_in_use_bytes{class=64}"), 0u) << "no 64-byte class";

        co_await c.read(rdma::span_of(local, 0, 1024), rr, 0);
        co_await c.write(rdma::span_of(local, 0, 1024), rr, 4096);
        auto ok = metric_values();
        EXPECT_EQ(ok["shoal_rdma_completions_by_opcode_total{opcode=rdma_read}"],
                  before["shoal_rdma_completions_by_opcode_total{opcode=rdma_read}"] + 1);
        EXPECT_GE(ok["shoal_rdma_completions_by_opcode_total{opcode=rdma_write}"],
                  before["shoal_rdma_completions_by_opcode_total{opcode=rdma_write}"] + 1);

        // A wrong rkey: the requester's completion fails with a remote access error.
        rdma::remote_region wrong = rr;
        wrong.rkey ^= 0x5a5a00;
        bool failed = false;
        try {
            co_await c.write(rdma::span_of(local, 0, 64), wrong, 0);
        } catch (const std::exception&) {
            failed = true;
        }
        EXPECT_TRUE(failed);
        auto bad = metric_values();
        EXPECT_EQ(bad["shoal_rdma_completion_errors_total{status=rem_access_err}"], 1);
        EXPECT_EQ(bad["shoal_rdma_completions_by_opcode_total{opcode=rdma_write}"],
                  ok["shoal_rdma_completions_by_opcode_total{opcode=rdma_write}"])
            << "a failed completion is counted by status only";

        local.reset();
        EXPECT_EQ(metric_values()["shoal_rdma_pool_class_in_use_bytes{class=4096}"],
                  before["shoal_rdma_pool_class_in_use_bytes{class=4096}"]);
        l.abort_accept();
    });
    EXPECT_EQ(rc, 0);
}

TEST(rdma_metrics, an_unread_stream_makes_the_writer_wait_for_credits) {
    int rc = run_rdma(1, []() -> future<> {
        auto group = rdma::publish_metrics();
        const auto a = addr(next_port());
        net::server_socket ss = rdma::listen(a);
        auto accepted = ss.accept();
        net::connected_socket client = co_await rdma::connect(a);
        net::accept_result server_side = co_await std::move(accepted);
        const double stalls = metric_values()["shoal_rdma_credit_stalls_total"];
        EXPECT_GE(stalls, 0);

        // 64 messages of a receive buffer each, four times the window, and nobody reads yet.
        const size_t msg = rdma::shard_context::local().opts().recv_buffer_size;
        const size_t total = 64 * msg;
        std::string data(total, 'x');
        net::output_stream out = client.output();
        future<> written = out.write(data).then([&out] { return out.flush(); });
        EXPECT_TRUE(co_await eventually([&] {
            return metric_values()["shoal_rdma_credit_stalls_total"] > stalls;
        })) << "the writer never stalled for credits";
        net::input_stream in = server_side.connection.input();
        net::temporary_buffer got = co_await in.read_exactly(total);
        EXPECT_EQ(got.size(), total);
        co_await std::move(written);

        client.abort();
        server_side.connection.abort();
        ss.abort_accept();
    });
    EXPECT_EQ(rc, 0);
}

TEST(rdma_metrics, optional_allocations_above_the_watermark_are_counted_apart) {
    rdma::options o = test_options();
    o.pool.high_watermark = 0.1; // 6.4 MiB of the 64 MiB limit
    int rc = run_rdma(
        1,
        []() -> future<> {
            auto group = rdma::publish_metrics();
            auto& pool = rdma::shard_context::local().pool();
            auto before = metric_values();
            EXPECT_EQ(before["shoal_rdma_pool_watermark_refusals_total"], 0);
            std::vector<rdma::buffer> held;
            while (!pool.above_high_watermark()) {
                held.push_back(pool.allocate(size_t(1) << 20));
            }
            EXPECT_FALSE(pool.try_allocate(4096, true)) << "optional, above the watermark";
            EXPECT_FALSE(pool.try_allocate(size_t(2) << 30)) << "too large";
            auto after = metric_values();
            EXPECT_EQ(after["shoal_rdma_pool_watermark_refusals_total"], 1);
            EXPECT_EQ(after["shoal_rdma_pool_refusals_total"], before["shoal_rdma_pool_refusals_total"] + 2);
            EXPECT_GE(after["shoal_rdma_pool_class_in_use_bytes{class=1048576}"],
                      double(held.size()) * (1 << 20));
            co_return;
        },
        o);
    EXPECT_EQ(rc, 0);
}
