#include "apps/echo/bench.hh"

#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "core/log.hh"
#include "core/smp.hh"
#include "net/temporary_buffer.hh"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>

namespace shoal::echo {

namespace {

logger bench_log("bench");
using clock_type = std::chrono::steady_clock;

/// What one shard measured in one cell.
struct shard_result {
    uint64_t requests = 0;
    uint64_t errors = 0;
    histogram latency_ns;
};

/// Fails a client whose echo `got` (at offset `at` of the reply) differs from `sent`.
[[noreturn]] void throw_echo_differs(const net::temporary_buffer& got, const net::temporary_buffer& sent,
                                     size_t at) {
    size_t i = 0;
    while (i < got.size() && got.get()[i] == sent.get()[at + i]) {
        ++i;
    }
    throw std::runtime_error(fmt::format("echo differs at byte {} of {}: got {:#04x}, sent {:#04x}", at + i,
                                         sent.size(), uint8_t(got.get()[i]), uint8_t(sent.get()[at + i])));
}

/// One closed-loop client: write a request, read the echo back (and compare it with the request
/// when `verify`), record the round trip.
future<> client_loop(net::connected_socket s, net::temporary_buffer msg, clock_type::time_point measure_from,
                     clock_type::time_point until, bool verify, shard_result& r) {
    auto in = s.input();
    auto out = s.output();
    const size_t size = msg.size();
    while (clock_type::now() < until) {
        auto t0 = clock_type::now();
        // The write proceeds while we read: large messages stream both ways at once.
        auto written = out.write(msg.share()).then([&out] { return out.flush(); });
        size_t got = 0;
        std::exception_ptr failed;
        try {
            while (got < size) {
                net::temporary_buffer b = co_await in.read_up_to(size - got);
                if (b.empty()) {
                    throw std::runtime_error("server closed the connection");
                }
                if (verify && std::memcmp(b.get(), msg.get() + got, b.size()) != 0) {
                    throw_echo_differs(b, msg, got);
                }
                got += b.size();
            }
        } catch (...) {
            failed = std::current_exception();
        }
        if (failed) {
            // The write still uses `out`, which lives in this frame: let it finish first.
            co_await std::move(written).handle_exception([](std::exception_ptr) {});
            std::rethrow_exception(failed);
        }
        co_await std::move(written);
        auto t1 = clock_type::now();
        if (t0 >= measure_from) {
            ++r.requests;
            r.latency_ns.record(
                uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
        }
    }
    co_await out.close();
}

/// Runs `conns` clients on this shard against `addr`.
future<shard_result> run_on_shard(net::transport t, net::socket_address addr, size_t size, unsigned conns,
                                  clock_type::time_point start, clock_type::time_point measure_from,
                                  clock_type::time_point until, bool verify) {
    auto r = std::make_unique<shard_result>();
    std::vector<net::connected_socket> sockets;
    for (unsigned i = 0; i < conns; ++i) {
        sockets.push_back(co_await t.connect(addr));
    }
    // Everyone starts together, once every shard is connected.
    auto now = clock_type::now();
    if (now < start) {
        co_await sleep(start - now);
    }
    net::temporary_buffer msg(size);
    for (size_t i = 0; i < size; ++i) {
        msg.get_write()[i] = char('a' + i % 26);
    }
    std::vector<future<>> loops;
    for (auto& s : sockets) {
        loops.push_back(client_loop(std::move(s), msg.share(), measure_from, until, verify, *r));
    }
    auto done = co_await when_all(std::move(loops));
    for (auto& f : done) {
        if (f.failed()) {
            ++r->errors;
            bench_log.warn("client failed: {}", f.get_exception());
        }
    }
    co_return std::move(*r);
}

future<cell_result> run_cell(net::transport t, bench_target target, size_t size, unsigned conc,
                             const bench_options& o) {
    unsigned shards = shard_count();
    // Connecting happens before `start`: leave room for it (it is not measured).
    auto start = clock_type::now() + std::chrono::milliseconds(50 + 2 * conc);
    auto measure_from = start + std::chrono::duration_cast<clock_type::duration>(o.warmup);
    auto until = measure_from + std::chrono::duration_cast<clock_type::duration>(o.duration);
    std::vector<future<shard_result>> parts;
    for (unsigned s = 0; s < shards; ++s) {
        unsigned n = conc / shards + (s < conc % shards ? 1 : 0);
        if (n == 0) {
            continue;
        }
        parts.push_back(
            submit_to(s, [t, addr = target.address, size, n, start, measure_from, until, v = o.verify] {
                return run_on_shard(t, addr, size, n, start, measure_from, until, v);
            }));
    }
    auto results = co_await when_all_succeed(std::move(parts));
    cell_result c;
    c.target = target.name;
    c.size = size;
    c.concurrency = conc;
    c.seconds = std::chrono::duration<double>(until - measure_from).count();
    c.warmup_seconds = std::chrono::duration<double>(measure_from - start).count();
    for (auto& r : results) {
        c.requests += r.requests;
        c.errors += r.errors;
        c.latency_ns.merge(r.latency_ns);
    }
    co_return c;
}

/// CPU seconds (user + system) process `pid` has used so far, or -1.
double process_cpu_seconds(int pid) {
    if (pid <= 0) {
        return -1;
    }
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(f, line)) {
        return -1;
    }
    // The fields after the command name (which may hold spaces) start after the last ')'.
    auto close = line.rfind(')');
    if (close == std::string::npos) {
        return -1;
    }
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    double ticks = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
        if (i == 14 || i == 15) { // utime, stime
            ticks += std::stod(field);
        }
    }
    return ticks / double(::sysconf(_SC_CLK_TCK));
}

std::string us(uint64_t ns) {
    return ns >= 100000 ? fmt::format("{:.0f}", double(ns) / 1000) : fmt::format("{:.1f}", double(ns) / 1000);
}

std::string gbps(double v) {
    return fmt::format("{:.2f}", v);
}

const cell_result* find_cell(const std::vector<cell_result>& cells, const std::string& target, size_t size,
                             unsigned conc) {
    for (const auto& c : cells) {
        if (c.target == target && c.size == size && c.concurrency == conc) {
            return &c;
        }
    }
    return nullptr;
}

} // namespace

std::string format_size(size_t bytes) {
    if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) {
        return fmt::format("{}M", bytes >> 20);
    }
    if (bytes >= 1024 && bytes % 1024 == 0) {
        return fmt::format("{}K", bytes >> 10);
    }
    return fmt::format("{}B", bytes);
}

future<std::vector<cell_result>> run_bench(net::transport t, bench_options opts) {
    std::vector<cell_result> out;
    unsigned repeat = std::max(1u, opts.repeat);
    for (size_t size : opts.sizes) {
        for (unsigned conc : opts.concurrency) {
            // Targets back to back for each cell, so a drift of the machine hits both alike.
            std::vector<std::vector<cell_result>> runs(opts.targets.size());
            for (unsigned r = 0; r < repeat; ++r) {
                for (size_t i = 0; i < opts.targets.size(); ++i) {
                    double cpu0 = process_cpu_seconds(opts.targets[i].pid);
                    runs[i].push_back(co_await run_cell(t, opts.targets[i], size, conc, opts));
                    double cpu1 = process_cpu_seconds(opts.targets[i].pid);
                    if (cpu0 >= 0 && cpu1 >= 0) {
                        runs[i].back().server_cpu_seconds = cpu1 - cpu0;
                    }
                    const auto& c = runs[i].back();
                    bench_log.info("{} size {} conc {}: {:.0f} req/s, p99 {} us{}", c.target,
                                   format_size(size), conc, c.qps(), us(c.latency_ns.percentile(99)),
                                   c.errors ? fmt::format(", {} failed clients", c.errors) : "");
                }
            }
            for (auto& rs : runs) {
                std::sort(rs.begin(), rs.end(),
                          [](const cell_result& a, const cell_result& b) { return a.qps() < b.qps(); });
                cell_result median = std::move(rs[rs.size() / 2]);
                median.runs = repeat;
                for (const auto& r : rs) {
                    median.errors = std::max(median.errors, r.errors);
                }
                out.push_back(std::move(median));
            }
        }
    }
    co_return out;
}

std::string format_table(const std::vector<cell_result>& cells, const std::string& target) {
    std::string s =
        "| size | concurrency | Gb/s | P90 (us) | P99 (us) | QPS |\n| --- | --- | --- | --- | --- | --- |\n";
    size_t last_size = SIZE_MAX;
    for (const auto& c : cells) {
        if (c.target != target) {
            continue;
        }
        std::string size = c.size == last_size ? "" : format_size(c.size);
        last_size = c.size;
        s += fmt::format("| {} | {} | {} | {} | {} | {:.0f} |\n", size, c.concurrency, gbps(c.gbps()),
                         us(c.latency_ns.percentile(90)), us(c.latency_ns.percentile(99)), c.qps());
    }
    return s;
}

std::string format_comparison(const std::vector<cell_result>& cells,
                              const std::vector<bench_target>& targets) {
    if (targets.size() < 2) {
        return {};
    }
    const std::string& a = targets[0].name;
    const std::string& b = targets[1].name;
    bool with_cpu = false;
    for (const auto& c : cells) {
        with_cpu |= c.server_cpu_seconds >= 0;
    }
    std::string s =
        fmt::format("| size | conc | {0} Gb/s | {1} Gb/s | {0} P90 | {1} P90 | {0} P99 | {1} P99 | "
                    "{0} QPS | {1} QPS | QPS {0}/{1} |",
                    a, b);
    s += with_cpu ? fmt::format(" {0} CPU µs/req | {1} CPU µs/req |\n", a, b) : "\n";
    s += "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |";
    s += with_cpu ? " --- | --- |\n" : "\n";
    size_t last_size = SIZE_MAX;
    for (const auto& ca : cells) {
        if (ca.target != a) {
            continue;
        }
        const cell_result* cb = find_cell(cells, b, ca.size, ca.concurrency);
        if (!cb) {
            continue;
        }
        std::string size = ca.size == last_size ? "" : format_size(ca.size);
        last_size = ca.size;
        double ratio = cb->qps() > 0 ? ca.qps() / cb->qps() : 0;
        s += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {:.0f} | {:.0f} | {:.2f} |", size,
                         ca.concurrency, gbps(ca.gbps()), gbps(cb->gbps()), us(ca.latency_ns.percentile(90)),
                         us(cb->latency_ns.percentile(90)), us(ca.latency_ns.percentile(99)),
                         us(cb->latency_ns.percentile(99)), ca.qps(), cb->qps(), ratio);
        if (with_cpu) {
            s += fmt::format(" {:.1f} | {:.1f} |", ca.server_us_per_request(), cb->server_us_per_request());
        }
        s += "\n";
    }
    return s;
}

std::string format_json(const std::vector<cell_result>& cells, const std::string& transport) {
    std::string s = fmt::format("{{\"transport\": \"{}\", \"cells\": [", transport);
    bool first = true;
    for (const auto& c : cells) {
        s += first ? "\n  " : ",\n  ";
        first = false;
        const auto& h = c.latency_ns;
        s +=
            fmt::format("{{\"target\": \"{}\", \"size\": {}, \"concurrency\": {}, \"seconds\": {:.3f}, "
                        "\"requests\": {}, \"qps\": {:.1f}, \"gbps\": {:.4f}, \"p50_us\": {:.2f}, "
                        "\"p90_us\": {:.2f}, \"p99_us\": {:.2f}, \"p999_us\": {:.2f}, \"max_us\": {:.2f}, "
                        "\"mean_us\": {:.2f}, \"failed_clients\": {}, \"runs\": {}, "
                        "\"server_cpu_us_per_request\": {:.2f}}}",
                        c.target, c.size, c.concurrency, c.seconds, c.requests, c.qps(), c.gbps(),
                        double(h.percentile(50)) / 1000, double(h.percentile(90)) / 1000,
                        double(h.percentile(99)) / 1000, double(h.percentile(99.9)) / 1000,
                        double(h.max()) / 1000, h.mean() / 1000, c.errors, c.runs, c.server_us_per_request());
    }
    s += "\n]}\n";
    return s;
}

} // namespace shoal::echo
