#pragma once

// Helpers of the RDMA tests that run on a real device (the Soft-RoCE guest): the device and
// address from the test environment, small per-shard resources, and an engine runner that
// starts and stops the RDMA layer around a test body.

#include "core/future_util.hh"
#include "core/log.hh"
#include "core/smp.hh"
#include "net/rdma/rdma.hh"
#include "softroce/rdma_test_env.hh"

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

/// How long a test waits for something that is not its subject (a connection set up, a state
/// polled for, a peer's reply): generous enough for the sanitizer build in the emulated guest on
/// a busy 2-core host, where work takes tens of times longer than in the release build natively.
/// A wait that reaches it is a failure (a hang), never a measurement.
inline constexpr std::chrono::milliseconds patience = 90s;

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

/// Runs `body` on shard 0 of `smp` unpinned shards with RDMA started with `o`; returns 0 when it
/// succeeded (a failure is added to the test). RDMA is stopped in any case.
inline int run_rdma(unsigned smp, std::function<future<>()> body, rdma::options o = test_options(),
                    reactor_config cfg = {}) {
    if (!env().error.empty()) {
        ADD_FAILURE() << env().error;
        return 1;
    }
    if (const char* levels = std::getenv("SHOAL_TEST_LOG")) {
        logging::apply_levels(levels); // e.g. SHOAL_TEST_LOG=rdma=debug,rdma-cm=debug
    }
    smp_options so;
    so.smp = smp;
    so.pin = false;
    so.reactor = cfg;
    return run_shards(so, [&]() -> future<int> {
        co_await rdma::start(o);
        std::exception_ptr failed;
        try {
            co_await body();
        } catch (...) {
            failed = std::current_exception();
        }
        co_await rdma::stop();
        if (failed) {
            ADD_FAILURE() << "test body failed: " << fmt::format("{}", failed);
            co_return 1;
        }
        co_return 0;
    });
}

/// Byte `i` of a test pattern.
inline char pattern_byte(size_t i, unsigned seed) {
    return char((i * 131 + seed * 7 + (i >> 13)) & 0xff);
}

inline void fill_pattern(char* p, size_t n, unsigned seed, size_t from = 0) {
    for (size_t i = 0; i < n; ++i) {
        p[i] = pattern_byte(from + i, seed);
    }
}

/// Index of the first byte that differs from the pattern, or SIZE_MAX.
inline size_t check_pattern(const char* p, size_t n, unsigned seed, size_t from = 0) {
    for (size_t i = 0; i < n; ++i) {
        if (p[i] != pattern_byte(from + i, seed)) {
            return i;
        }
    }
    return SIZE_MAX;
}

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

/// Writes `size` pattern bytes in writes of `chunk`, then flushes.
inline future<> write_pattern(net::output_stream& out, size_t size, unsigned seed, size_t chunk) {
    std::string block(std::min(size, chunk), '\0');
    for (size_t off = 0; off < size; off += chunk) {
        size_t n = std::min(chunk, size - off);
        fill_pattern(block.data(), n, seed, off);
        co_await out.write(block.data(), n);
    }
    co_await out.flush();
}

/// Reads `size` bytes and checks the pattern; returns the offset of the first bad byte or
/// SIZE_MAX (and `size + 1` when the stream ended early).
inline future<size_t> read_pattern(net::input_stream& in, size_t size, unsigned seed) {
    size_t got = 0;
    size_t bad = SIZE_MAX;
    while (got < size) {
        net::temporary_buffer b = co_await in.read_up_to(size - got);
        if (b.empty()) {
            co_return size + 1;
        }
        if (bad == SIZE_MAX) {
            size_t i = check_pattern(b.get(), b.size(), seed, got);
            if (i != SIZE_MAX) {
                bad = got + i;
            }
        }
        got += b.size();
    }
    co_return bad;
}

/// Polls `cond` every millisecond until it holds or `timeout` passes; returns whether it held.
template <typename Cond>
future<bool> eventually(Cond cond, std::chrono::milliseconds timeout = patience) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!cond()) {
        if (std::chrono::steady_clock::now() > deadline) {
            co_return false;
        }
        co_await sleep(1ms);
    }
    co_return true;
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
