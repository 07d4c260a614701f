#pragma once

#include "apps/common/bench_target.hh"
#include "apps/echo/histogram.hh"
#include "core/future.hh"
#include "net/socket_address.hh"
#include "net/transport.hh"

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace shoal::echo {

using apps::bench_target;

/// What `run_bench` measures: every (size, concurrency) cell against every target.
struct bench_options {
    std::vector<bench_target> targets;
    std::vector<size_t> sizes;
    std::vector<unsigned> concurrency;
    std::chrono::duration<double> duration{0.5}; ///< measured time per cell and target
    std::chrono::duration<double> warmup{0.1};   ///< unmeasured time before it
    /// Runs of each cell per target, interleaved (A B A B ...); the run with the median QPS is
    /// reported, so a burst of noise on a shared machine hits one run, not the result.
    unsigned repeat = 1;
    /// Compare every echoed byte with what was sent; a client whose echo differs fails with the
    /// offset of the first wrong byte. Off by default: a `memcmp` of each reply is client CPU
    /// that the epoll comparison's numbers predate.
    bool verify = false;
};

/// One cell: closed-loop clients, each with one request of `size` bytes in flight that the
/// server echoes back; latency is from the first byte written to the last byte read.
struct cell_result {
    std::string target;
    size_t size = 0;
    unsigned concurrency = 0;
    double seconds = 0;
    uint64_t requests = 0;
    uint64_t errors = 0;
    unsigned runs = 1;              ///< runs made; the reported one has the median QPS
    double server_cpu_seconds = -1; ///< CPU the server used during the cell (-1: unknown)
    histogram latency_ns;

    /// Requests per second over the measured time.
    double qps() const noexcept { return seconds > 0 ? double(requests) / seconds : 0; }
    /// Payload throughput in one direction, like seed 001's table.
    double gbps() const noexcept { return qps() * double(size) * 8 / 1e9; }
    /// Server CPU microseconds per request (warm-up included in the CPU time, so a slight
    /// overestimate); negative when unknown.
    double server_us_per_request() const noexcept {
        return server_cpu_seconds < 0 || requests == 0
                   ? -1
                   : server_cpu_seconds * 1e6 / double(requests) * (seconds / (seconds + warmup_seconds));
    }
    double warmup_seconds = 0;
};

/// Runs the benchmark from shard 0; connections of a cell are spread over all shards.
future<std::vector<cell_result>> run_bench(net::transport t, bench_options opts);

/// The seed-001 table (size, concurrency, Gb/s, P90 µs, P99 µs, QPS) of one target's cells.
std::string format_table(const std::vector<cell_result>& cells, const std::string& target);
/// Side by side: per cell, each target's Gb/s, P90, P99, QPS and the QPS ratio of the first
/// target to the second.
std::string format_comparison(const std::vector<cell_result>& cells,
                              const std::vector<bench_target>& targets);
/// Every cell as JSON.
std::string format_json(const std::vector<cell_result>& cells, const std::string& transport);

/// "128B" / "4K" / "1M" for a byte count (K and M only for exact multiples).
std::string format_size(size_t bytes);

} // namespace shoal::echo
