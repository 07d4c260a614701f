#include "apps/kv/bench.hh"

#include "apps/kv/reply_reader.hh"
#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "core/smp.hh"
#include "kv/client.hh"
#include "kv/rdma_transport.hh"
#include "net/rdma/context.hh"
#include "net/rdma/memory_pool.hh"
#include "net/tcp/tcp.hh"

#include <algorithm>
#include <fstream>
#include <memory>
#include <random>
#include <unistd.h>

#include <fmt/core.h>

namespace shoal::kv_app {

namespace {

using clock_type = std::chrono::steady_clock;

/// CPU seconds (user + system) process `pid` has used; -1 when unreadable.
double process_cpu_seconds(int pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto close = stat.rfind(')');
    if (close == std::string::npos) {
        return -1;
    }
    std::vector<std::string> fields;
    size_t pos = close + 2;
    while (pos < stat.size()) {
        size_t sp = stat.find(' ', pos);
        fields.push_back(stat.substr(pos, sp - pos));
        if (sp == std::string::npos) {
            break;
        }
        pos = sp + 1;
    }
    if (fields.size() < 13) {
        return -1;
    }
    // Fields after the command: state(0) ... utime(11) stime(12), in clock ticks.
    return double(std::stoull(fields[11]) + std::stoull(fields[12])) / double(::sysconf(_SC_CLK_TCK));
}

std::string key_of(unsigned k) {
    return fmt::format("key:{:08}", k);
}

/// A connection's buffers and random state.
struct client {
    net::input_stream in;
    net::output_stream out;
    std::string rx;
    size_t rx_pos = 0;
    std::mt19937_64 rng;

    /// Reads until one complete reply is buffered; returns it.
    future<reply_info> reply(bool multi_line) {
        for (;;) {
            reply_info r = next_reply(std::string_view(rx).substr(rx_pos), multi_line);
            if (r.bytes) {
                rx_pos += r.bytes;
                co_return r;
            }
            if (rx_pos > 0) {
                rx.erase(0, rx_pos);
                rx_pos = 0;
            }
            net::temporary_buffer b = co_await in.read();
            if (b.empty()) {
                throw std::runtime_error("server closed the connection");
            }
            rx.append(b.view());
        }
    }
};

/// One shard's part of a run.
struct shard_part {
    uint64_t gets = 0, sets = 0, hits = 0, keys_asked = 0, errors = 0;
    uint64_t direct_reads = 0, control_gets = 0, inline_puts = 0, granted_puts = 0;
    uint64_t zero_copy_puts = 0, zero_copy_gets = 0;
    cached_get_split split;
    echo::histogram get_ns;
    echo::histogram set_ns;

    /// One measured operation: a get (of `keys` keys, `hits` found) or a set.
    void record(bool get, uint64_t found, bool error, unsigned keys, clock_type::duration took) {
        uint64_t ns = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(took).count());
        errors += error;
        if (get) {
            ++gets;
            hits += found;
            keys_asked += keys;
            get_ns.record(ns);
        } else {
            ++sets;
            set_ns.record(ns);
        }
    }
};

size_t pick_len(const kv_bench_options& o, std::mt19937_64& rng) {
    return o.value_min + (o.value_max > o.value_min ? rng() % (o.value_max - o.value_min + 1) : 0);
}

void append_set(std::string& req, unsigned k, size_t len, const std::string& value) {
    req += fmt::format("set {} 0 0 {}\r\n", key_of(k), len);
    req.append(value, 0, len);
    req += "\r\n";
}

future<> preload_range(net::socket_address addr, unsigned first, unsigned last, const kv_bench_options& o) {
    auto s = co_await net::tcp::connect(addr);
    client c{s.input(), s.output(), {}, 0, std::mt19937_64(first)};
    std::string value(o.value_max, 'v');
    std::string req;
    for (unsigned k = first; k < last;) {
        req.clear();
        unsigned n = 0;
        for (; n < 64 && k < last; ++n, ++k) {
            append_set(req, k, pick_len(o, c.rng), value);
        }
        co_await c.out.write(std::string_view(req));
        co_await c.out.flush();
        for (unsigned i = 0; i < n; ++i) {
            co_await c.reply(false);
        }
    }
    co_await c.out.close();
}

future<> run_connection(net::socket_address addr, const kv_bench_options& o, unsigned id,
                        clock_type::time_point start, clock_type::time_point end, shard_part& part) {
    auto s = co_await net::tcp::connect(addr);
    client c{s.input(), s.output(), {}, 0, std::mt19937_64(0x5eed + id)};
    std::string value(o.value_max, 'v');
    std::string req;
    std::vector<bool> is_get(o.pipeline);
    std::uniform_real_distribution<double> coin(0, 1);
    while (clock_type::now() < end) {
        req.clear();
        for (unsigned p = 0; p < o.pipeline; ++p) {
            is_get[p] = coin(c.rng) < o.get_ratio;
            if (is_get[p]) {
                req += "get";
                for (unsigned w = 0; w < o.multiget; ++w) {
                    req += ' ';
                    req += key_of(unsigned(c.rng() % o.keys));
                }
                req += "\r\n";
            } else {
                append_set(req, unsigned(c.rng() % o.keys), pick_len(o, c.rng), value);
            }
        }
        auto t0 = clock_type::now();
        co_await c.out.write(std::string_view(req));
        co_await c.out.flush();
        for (unsigned p = 0; p < o.pipeline; ++p) {
            reply_info r = co_await c.reply(is_get[p]);
            auto t1 = clock_type::now();
            if (t0 < start || t1 > end) {
                continue;
            }
            part.record(is_get[p], r.values, r.error, o.multiget, t1 - t0);
        }
    }
    co_await c.out.close();
}

kv::rdma_client_options rdma_options(const kv_bench_options& o) {
    kv::rdma_client_options ro;
    if (!o.location_cache) {
        ro.location_cache = 0;
    }
    if (o.inline_put_max) {
        ro.inline_put_max = *o.inline_put_max;
    }
    ro.inline_get_max = o.inline_get_max;
    ro.time_cached_gets = o.time_gets;
    return ro;
}

/// Sets keys [first, last) over the native RDMA protocol, 64 in flight.
future<> preload_range_rdma(net::socket_address addr, unsigned first, unsigned last,
                            const kv_bench_options& o) {
    kv::internal::rdma_transport t(addr, 0, std::chrono::seconds(10), rdma_options(o));
    std::mt19937_64 rng(first);
    std::string value(o.value_max, 'v');
    std::exception_ptr failed;
    for (unsigned k = first; k < last && !failed;) {
        std::vector<future<kv::store_outcome>> batch;
        for (unsigned n = 0; n < 64 && k < last; ++n, ++k) {
            batch.push_back(t.store(kv::internal::store_op::set, key_of(k),
                                    std::string_view(value).substr(0, pick_len(o, rng)), 0, 0, 0));
        }
        try {
            co_await when_all_succeed(std::move(batch));
        } catch (...) {
            failed = std::current_exception();
        }
    }
    co_await t.close();
    if (failed) {
        std::rethrow_exception(failed);
    }
}

/// One of an RDMA connection's `pipeline` request streams: one request at a time.
future<> rdma_lane(kv::internal::rdma_transport& t, const kv_bench_options& o, uint64_t seed,
                   clock_type::time_point start, clock_type::time_point end, shard_part& part) {
    std::mt19937_64 rng(seed);
    std::string value(o.value_max, 'v');
    std::uniform_real_distribution<double> coin(0, 1);
    // --zero-copy: PUTs from, GETs into this lane's registered buffers (the same bytes as `value`).
    net::rdma::buffer src, dst;
    if (o.zero_copy) {
        net::rdma::memory_pool& pool = net::rdma::shard_context::local().pool();
        src = pool.allocate(std::max<size_t>(o.value_max, 1));
        std::memcpy(src.data(), value.data(), value.size());
        dst = pool.allocate(kv::get_into_capacity(key_of(0).size(), o.value_max));
    }
    // The keys, formatted once (a key space of up to 64 Ki keys; larger ones per request): the
    // loop's work per request is the request's, as perftest's is the READ's alone.
    std::vector<std::string> keys(o.keys <= 65536 ? o.keys : 0);
    for (unsigned k = 0; k < keys.size(); ++k) {
        keys[k] = key_of(k);
    }
    auto pick_key = [&] {
        auto k = unsigned(rng() % o.keys);
        return keys.empty() ? key_of(k) : keys[k];
    };
    for (auto now = clock_type::now(); now < end;) {
        bool get = coin(rng) < o.get_ratio;
        uint64_t found = 0;
        bool error = false;
        const std::optional<kv::rdma_client_stats> before =
            o.time_gets ? std::optional(t.stats()) : std::nullopt; // no copy per op unless asked
        // The key is made before the clock starts: the latency is the request's, as perftest's
        // is the READ's alone.
        std::string key = !get || o.multiget == 1 ? pick_key() : std::string();
        auto t0 = clock_type::now();
        try {
            if (get && o.zero_copy) {
                found =
                    (co_await t.get_into(std::move(key), net::rdma::span_of(dst, 0, dst.capacity()))) ? 1 : 0;
            } else if (get && o.multiget == 1) {
                found = (co_await t.get_one(std::move(key))) ? 1 : 0;
            } else if (get) {
                std::vector<std::string> many;
                for (unsigned w = 0; w < o.multiget; ++w) {
                    many.push_back(pick_key());
                }
                for (const auto& v : co_await t.get(std::move(many))) {
                    found += v.has_value();
                }
            } else if (o.zero_copy) {
                co_await t.store_from(kv::internal::store_op::set, std::move(key),
                                      net::rdma::span_of(src, 0, pick_len(o, rng)), 0, 0, 0);
            } else {
                co_await t.store(kv::internal::store_op::set, std::move(key),
                                 std::string_view(value).substr(0, pick_len(o, rng)), 0, 0, 0);
            }
        } catch (const kv::client_error&) {
            error = true;
        }
        auto t1 = clock_type::now();
        now = t1; // the loop's clock read too
        if (t0 >= start && t1 <= end) {
            part.record(get, found, error, o.multiget, t1 - t0);
            if (const auto& after = t.stats();
                before && after.timed_gets == before->timed_gets + 1 && o.pipeline == 1) {
                // This GET was served by a cached location and timed (one request at a time: the
                // counters moved for it alone).
                uint64_t read = after.timed_read_ns - before->timed_read_ns;
                uint64_t total =
                    uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
                ++part.split.gets;
                part.split.before_ns += after.timed_before_ns - before->timed_before_ns;
                part.split.after_ns += after.timed_after_ns - before->timed_after_ns;
                part.split.read_ns.record(read);
                part.split.software_ns.record(total > read ? total - read : 0);
            }
        }
    }
}

/// One RDMA client (an rdma_transport: a connection per server shard) with `pipeline` requests
/// in flight.
future<> run_rdma_connection(net::socket_address addr, const kv_bench_options& o, unsigned id,
                             clock_type::time_point start, clock_type::time_point end, shard_part& part) {
    kv::internal::rdma_transport t(addr, 0, std::chrono::seconds(10), rdma_options(o));
    std::vector<future<>> lanes;
    for (unsigned p = 0; p < o.pipeline; ++p) {
        lanes.push_back(rdma_lane(t, o, 0x5eed + uint64_t(id) * 1000 + p, start, end, part));
    }
    co_await when_all_succeed(std::move(lanes));
    part.direct_reads += t.stats().direct_reads;
    part.control_gets += t.stats().control_gets;
    part.inline_puts += t.stats().inline_puts;
    part.granted_puts += t.stats().granted_puts;
    part.zero_copy_puts += t.stats().zero_copy_puts;
    part.zero_copy_gets += t.stats().zero_copy_gets;
    co_await t.close();
}

/// One shard's connections of a run. (A named coroutine, so its parameters live in its frame.)
future<shard_part> run_shard(const kv_target& t, const kv_bench_options& o, unsigned s, unsigned shards,
                             clock_type::time_point start, clock_type::time_point end) {
    shard_part part;
    std::vector<future<>> conns;
    for (unsigned id = s; id < o.connections; id += shards) {
        conns.push_back(o.transport == kv_transport::rdma
                            ? run_rdma_connection(t.address, o, id, start, end, part)
                            : run_connection(t.address, o, id, start, end, part));
    }
    co_await when_all_succeed(std::move(conns));
    co_return part;
}

future<kv_result> run_once(const kv_target& t, const kv_bench_options& o) {
    unsigned shards = shard_count();
    auto start = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(o.warmup);
    auto end = start + std::chrono::duration_cast<clock_type::duration>(o.duration);
    double cpu0 = t.pid ? process_cpu_seconds(t.pid) : -1;
    std::vector<future<shard_part>> parts;
    for (unsigned s = 0; s < shards; ++s) {
        parts.push_back(
            submit_to(s, [&t, &o, s, shards, start, end] { return run_shard(t, o, s, shards, start, end); }));
    }
    auto done = co_await when_all_succeed(std::move(parts));
    double cpu1 = t.pid ? process_cpu_seconds(t.pid) : -1;
    kv_result r;
    r.target = t.name;
    r.seconds = o.duration.count();
    for (auto& p : done) {
        r.gets += p.gets;
        r.sets += p.sets;
        r.hits += p.hits;
        r.keys_asked += p.keys_asked;
        r.errors += p.errors;
        r.direct_reads += p.direct_reads;
        r.control_gets += p.control_gets;
        r.inline_puts += p.inline_puts;
        r.granted_puts += p.granted_puts;
        r.zero_copy_puts += p.zero_copy_puts;
        r.zero_copy_gets += p.zero_copy_gets;
        r.split.gets += p.split.gets;
        r.split.before_ns += p.split.before_ns;
        r.split.after_ns += p.split.after_ns;
        r.split.read_ns.merge(p.split.read_ns);
        r.split.software_ns.merge(p.split.software_ns);
        r.get_ns.merge(p.get_ns);
        r.set_ns.merge(p.set_ns);
    }
    if (cpu0 >= 0 && cpu1 >= 0) {
        // The warm-up's CPU is in the difference: scale it to the measured part.
        r.server_cpu_seconds = (cpu1 - cpu0) * o.duration.count() / (o.duration.count() + o.warmup.count());
    }
    co_return r;
}

} // namespace

future<std::vector<kv_result>> run_kv_bench(kv_bench_options opts) {
    if (opts.preload) {
        for (const auto& t : opts.targets) {
            std::vector<future<>> loads;
            unsigned n = std::max(1u, std::min(8u, opts.keys / 1000 + 1));
            for (unsigned i = 0; i < n; ++i) {
                unsigned first = opts.keys * i / n, last = opts.keys * (i + 1) / n;
                loads.push_back(opts.transport == kv_transport::rdma
                                    ? preload_range_rdma(t.address, first, last, opts)
                                    : preload_range(t.address, first, last, opts));
            }
            co_await when_all_succeed(std::move(loads));
        }
    }
    std::vector<std::vector<kv_result>> runs(opts.targets.size());
    for (unsigned rep = 0; rep < std::max(1u, opts.repeat); ++rep) {
        for (size_t i = 0; i < opts.targets.size(); ++i) {
            runs[i].push_back(co_await run_once(opts.targets[i], opts));
        }
    }
    std::vector<kv_result> out;
    for (auto& r : runs) {
        std::sort(r.begin(), r.end(),
                  [](const kv_result& a, const kv_result& b) { return a.qps() < b.qps(); });
        out.push_back(std::move(r[r.size() / 2]));
    }
    co_return out;
}

namespace {

std::string us(uint64_t ns) {
    return fmt::format("{:.1f}", double(ns) / 1000.0);
}

} // namespace

std::string format_kv_table(const std::vector<kv_result>& results, const kv_bench_options& o) {
    std::string s = fmt::format(
        "{}keys {}, values {}{} B, {:.0f}% gets x{} keys, {} connections, pipeline {}, {:.1f} s\n\n",
        o.transport == kv_transport::rdma
            ? fmt::format("rdma{}, ", o.location_cache ? "" : " (no location cache)")
            : std::string(),
        o.keys, o.value_min, o.value_max != o.value_min ? fmt::format("-{}", o.value_max) : "",
        o.get_ratio * 100, o.multiget, o.connections, o.pipeline, o.duration.count());
    s += "| target | op | count | QPS | P50 µs | P90 µs | P99 µs | P99.9 µs | hit % | server CPU µs/op |\n";
    s += "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
    for (const auto& r : results) {
        std::string cpu = r.cpu_us_per_op() >= 0 ? fmt::format("{:.2f}", r.cpu_us_per_op()) : "-";
        auto row = [&](const char* op, uint64_t n, const echo::histogram& h, std::string hit) {
            if (n == 0) {
                return;
            }
            s += fmt::format("| {} | {} | {} | {:.0f} | {} | {} | {} | {} | {} | {} |\n", r.target, op, n,
                             double(n) / r.seconds, us(h.percentile(50)), us(h.percentile(90)),
                             us(h.percentile(99)), us(h.percentile(99.9)), hit, cpu);
        };
        row("get", r.gets, r.get_ns,
            r.keys_asked ? fmt::format("{:.1f}", 100.0 * double(r.hits) / double(r.keys_asked)) : "-");
        row("set", r.sets, r.set_ns, "-");
        s += fmt::format("| {} | all | {} | {:.0f} | | | | | | {} |\n", r.target, r.gets + r.sets, r.qps(),
                         cpu);
        if (r.errors) {
            s += fmt::format("\n{}: {} error replies\n", r.target, r.errors);
        }
        if (o.transport == kv_transport::rdma) {
            s += fmt::format("\n{} (rdma): {} GETs by a cached location (one READ), {} by a request; {} PUTs "
                             "inline, {} granted; zero-copy: {} PUTs, {} GETs\n",
                             r.target, r.direct_reads, r.control_gets, r.inline_puts, r.granted_puts,
                             r.zero_copy_puts, r.zero_copy_gets);
            if (const cached_get_split& c = r.split; c.gets) {
                s += fmt::format(
                    "{} (rdma): {} cached GETs timed: READ (issue → resumed) P50 {} µs; the rest P50 "
                    "{} µs (mean µs: before the READ {:.2f}, after it {:.2f}, return to the caller "
                    "{:.2f})\n",
                    r.target, c.gets, us(c.read_ns.percentile(50)), us(c.software_ns.percentile(50)),
                    double(c.before_ns) / double(c.gets) / 1e3, double(c.after_ns) / double(c.gets) / 1e3,
                    c.software_ns.mean() / 1e3 - double(c.before_ns + c.after_ns) / double(c.gets) / 1e3);
            }
        }
    }
    if (results.size() >= 2 && results[1].qps() > 0) {
        s += fmt::format("\nQPS {} / {}: {:.2f}\n", results[0].target, results[1].target,
                         results[0].qps() / results[1].qps());
    }
    return s;
}

std::string format_kv_json(const std::vector<kv_result>& results, const kv_bench_options& o) {
    std::string s = "{\n";
    s += fmt::format(
        "  \"keys\": {}, \"value_min\": {}, \"value_max\": {}, \"get_ratio\": {}, \"multiget\": {}, "
        "\"connections\": {}, \"pipeline\": {}, \"seconds\": {},\n  \"results\": [\n",
        o.keys, o.value_min, o.value_max, o.get_ratio, o.multiget, o.connections, o.pipeline,
        o.duration.count());
    for (size_t i = 0; i < results.size(); ++i) {
        const auto& r = results[i];
        auto op = [&](const echo::histogram& h, uint64_t n) {
            return fmt::format(
                "{{\"count\": {}, \"qps\": {:.1f}, \"p50_us\": {}, \"p90_us\": {}, \"p99_us\": {}, "
                "\"p999_us\": {}, \"max_us\": {}}}",
                n, double(n) / r.seconds, us(h.percentile(50)), us(h.percentile(90)), us(h.percentile(99)),
                us(h.percentile(99.9)), us(h.max()));
        };
        s += fmt::format(
            "    {{\"target\": \"{}\", \"qps\": {:.1f}, \"hits\": {}, \"keys_asked\": {}, \"errors\": {}, "
            "\"server_cpu_us_per_op\": {:.3f}, \"direct_reads\": {}, \"control_gets\": {}, \"get\": {}, "
            "\"set\": {}}}{}\n",
            r.target, r.qps(), r.hits, r.keys_asked, r.errors, r.cpu_us_per_op(), r.direct_reads,
            r.control_gets, op(r.get_ns, r.gets), op(r.set_ns, r.sets), i + 1 < results.size() ? "," : "");
    }
    s += "  ]\n}\n";
    return s;
}

} // namespace shoal::kv_app
