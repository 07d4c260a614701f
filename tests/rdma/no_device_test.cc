// Without an RDMA device (this host natively): RDMA fails with a clear message naming what was
// looked for, and the engine keeps working.
#include "core/future_util.hh"
#include "core/smp.hh"
#include "net/rdma/connection.hh"
#include "net/rdma/context.hh"
#include "net/rdma/device.hh"
#include "net/rdma/error.hh"
#include "support/run.hh"

#include <gtest/gtest.h>

using namespace shoal;
namespace rdma = shoal::net::rdma;

namespace {
bool host_has_rdma() {
    return !rdma::device_names().empty();
}
} // namespace

TEST(no_device, open_names_what_was_looked_for) {
    if (host_has_rdma()) {
        GTEST_SKIP() << "this host has an RDMA device";
    }
    try {
        rdma::device::open({.name = "mlx5_0"});
        FAIL() << "no error";
    } catch (const rdma::device_error& e) {
        std::string m = e.what();
        EXPECT_NE(m.find("no RDMA device"), std::string::npos) << m;
        EXPECT_NE(m.find("mlx5_0"), std::string::npos) << m;
        EXPECT_NE(m.find("TCP"), std::string::npos) << m;
    }
    try {
        rdma::device::open({.address = "10.1.2.3"});
        FAIL() << "no error";
    } catch (const rdma::device_error& e) {
        EXPECT_NE(std::string(e.what()).find("10.1.2.3"), std::string::npos) << e.what();
    }
}

TEST(no_device, start_fails_and_the_engine_keeps_running) {
    if (host_has_rdma()) {
        GTEST_SKIP() << "this host has an RDMA device";
    }
    std::string message;
    int rc = shoal::testing::run_in_shards(2, [&]() -> future<> {
        try {
            co_await rdma::start();
        } catch (const rdma::device_error& e) {
            message = e.what();
        }
        // Not started anywhere; the shards still work.
        EXPECT_FALSE(rdma::started());
        int v = co_await submit_to(1, [] { return rdma::started() ? -1 : 7; });
        EXPECT_EQ(v, 7);
        EXPECT_THROW(rdma::shard_context::local(), rdma::rdma_error);
    });
    EXPECT_EQ(rc, 0);
    EXPECT_NE(message.find("no RDMA device"), std::string::npos) << message;
}

#ifndef NDEBUG
TEST(shard_checks, a_resource_touched_from_another_shard_aborts_in_debug_builds) {
    // check_shard is what every per-shard RDMA object calls on entry in debug builds.
    EXPECT_DEATH(rdma::internal::check_shard(3, "RDMA connection"),
                 "RDMA connection of shard 3 used on shard 0");
    rdma::internal::check_shard(0, "RDMA connection"); // the owner: fine
}
#endif

TEST(listener, a_default_constructed_one_fails_cleanly) {
    rdma::listener l;
    EXPECT_THROW((void)l.local_address(), std::logic_error);
    l.abort_accept(); // nothing to abort
    future<rdma::connection> f = l.accept();
    ASSERT_TRUE(f.available());
    EXPECT_TRUE(f.failed());
    EXPECT_THROW((void)f.get(), std::logic_error);
}
