#pragma once

// Helpers of the RDMA tests that run on a real device (the Soft-RoCE guest): the device and
// address from the test environment, small per-shard resources, and an engine runner that
// starts and stops the RDMA layer around a test body.

#include "core/future_util.hh"
#include "core/log.hh"
#include "core/smp.hh"
#include "net/rdma/rdma.hh"
#include "softroce/rdma_test_env.hh"
#include "support/patience.hh"
#include "support/peer_process.hh"
#include "support/run.hh"
#include "support/stream_pattern.hh"

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include <gtest/gtest.h>

namespace shoal::rdma_test {

using namespace std::chrono_literals;
namespace rdma = shoal::net::rdma;

/// True in the ASan/UBSan build: the guest runs it ~2-3x slower, and tests whose size is set
/// by a count rather than by what they check run smaller there.
#ifdef SHOAL_ASAN
inline constexpr bool sanitized_build = true;
#else
inline constexpr bool sanitized_build = false;
#endif

using shoal::testing::eventually;
using shoal::testing::patience;

/// The RDMA environment (SHOAL_RDMA_*); fails the test when it is not usable.
inline const shoal::testing::rdma_test_env& env() {
    static shoal::testing::rdma_test_env e = shoal::testing::rdma_test_env::from_environment();
    return e;
}

/// Small resources: tests run several engines one after another in a small guest.
inline rdma::options test_options() {
    rdma::options o;
    o.device.name = env().device;
    o.pool.region_size = size_t(4) << 20;
    o.pool.initial_bytes = size_t(8) << 20; // room for the SRQ slack (128 × 16 KiB) and a 16 MiB stream
    o.pool.max_bytes = size_t(64) << 20;
    o.recv_buffer_size = size_t(16) << 10;
    o.srq_size = 2048;
    o.cq_size = 2048;
    o.connection.resolve_timeout = patience;
    o.connection.connect_timeout = patience;
    return o;
}

/// A distinct port per call, so tests never meet an earlier test's listener.
inline uint16_t next_port() {
    static std::atomic<uint16_t> port{uint16_t(20000 + (getpid() % 2000) * 10)};
    return port++;
}

inline net::socket_address addr(uint16_t port) {
    return net::socket_address::from_host_port(env().ip, port);
}

/// `shoal::testing::run_in_shards` with RDMA started with `o` around `body` on shard 0; returns 0
/// when the body succeeded (a failure, or a dropped failed future, is added to the test). RDMA is
/// stopped in any case.
inline int run_rdma(unsigned smp, std::function<future<>()> body, rdma::options o = test_options(),
                    reactor_config cfg = {}) {
    if (!env().error.empty()) {
        ADD_FAILURE() << env().error;
        return 1;
    }
    if (const char* levels = std::getenv("SHOAL_TEST_LOG")) {
        logging::apply_levels(levels); // e.g. SHOAL_TEST_LOG=rdma=debug,rdma-cm=debug
    }
    return shoal::testing::run_in_shards(
        smp,
        [&]() -> future<> {
            co_await rdma::start(o);
            std::exception_ptr failed;
            try {
                co_await body();
            } catch (...) {
                failed = std::current_exception();
            }
            co_await rdma::stop();
            if (failed) {
                std::rethrow_exception(failed);
            }
        },
        cfg);
}

using shoal::testing::check_pattern;
using shoal::testing::fill_pattern;
using shoal::testing::pattern_byte;
using shoal::testing::read_pattern;
using shoal::testing::reap;
using shoal::testing::spawn_peer;
using shoal::testing::test_or_peer_main;
using shoal::testing::write_pattern;

/// Echoes every read back (write, flush) until the peer ends its side, then closes.
inline future<> echo_stream(net::connected_socket s) {
    net::input_stream in = s.input();
    net::output_stream out = s.output();
    for (;;) {
        net::temporary_buffer b = co_await in.read();
        if (b.empty()) {
            break;
        }
        co_await out.write(std::move(b));
        co_await out.flush();
    }
    co_await out.close();
}

/// Pool buffers of the calling shard held by anything but the SRQs' posted receives.
inline uint64_t buffers_held() {
    auto& ctx = rdma::shard_context::local();
    return ctx.pool().stats().in_use_buffers - ctx.stats().srq_posted; // every size class
}

/// Waits until no connection is left on any shard.
inline future<bool> all_connections_gone(std::chrono::milliseconds timeout = patience) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        uint64_t n = 0;
        for (unsigned s = 0; s < shard_count(); ++s) {
            n += co_await submit_to(s, [] { return rdma::shard_context::local().stats().connections; });
        }
        if (n == 0) {
            co_return true;
        }
        if (std::chrono::steady_clock::now() > deadline) {
            co_return false;
        }
        co_await sleep(2ms);
    }
}

/// Runs `op` and returns the message of the remote_access_error it fails with ("" if none).
inline future<std::string> remote_error_of(future<> op) {
    try {
        co_await std::move(op);
    } catch (const rdma::remote_access_error& e) {
        co_return std::string(e.what());
    } catch (const std::exception& e) {
        co_return std::string("other error: ") + e.what();
    }
    co_return std::string();
}

} // namespace shoal::rdma_test

/// ASSERT for coroutine bodies: throws, so the body fails and RDMA is still stopped.
#define RDMA_CHECK(cond)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            throw std::runtime_error(std::string("check failed: " #cond " at line ") +                       \
                                     std::to_string(__LINE__));                                              \
        }                                                                                                    \
    } while (0)
