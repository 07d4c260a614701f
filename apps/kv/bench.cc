#include "apps/kv/bench.hh"

#include "apps/kv/reply_reader.hh"
#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "core/smp.hh"
#include "kv/client/client.hh"
#include "kv/client/internal/rdma_transport.hh"
#include "net/rdma/context.hh"
#include "net/rdma/memory_pool.hh"
#include "net/tcp/tcp.hh"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iterator>
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
    uint64_t set_failures = 0, wrong_values = 0; ///< cache mode
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

void append_set(std::string& req, unsigned k, size_t len, const std::string& value) {
    req += fmt::format("set {} 0 0 {}\r\n", key_of(k), len);
    req.append(value, 0, len);
    req += "\r\n";
}

future<> preload_range(net::socket_address addr, unsigned first, unsigned last, const kv_bench_options& o) {
    auto s = co_await net::tcp::connect(addr);
    client c{s.input(), s.output(), {}, 0, std::mt19937_64(first)};
    std::string value(o.values.max(), 'v');
    std::string req;
    for (unsigned k = first; k < last;) {
        req.clear();
        unsigned n = 0;
        for (; n < 64 && k < last; ++n, ++k) {
            append_set(req, k, o.values(c.rng), value);
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
    std::string value(o.values.max(), 'v');
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
                    req += key_of(unsigned(o.keys(c.rng)));
                }
                req += "\r\n";
            } else {
                append_set(req, unsigned(o.keys(c.rng)), o.values(c.rng), value);
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
    std::string value(o.values.max(), 'v');
    std::exception_ptr failed;
    for (unsigned k = first; k < last && !failed;) {
        std::vector<future<kv::store_outcome>> batch;
        for (unsigned n = 0; n < 64 && k < last; ++n, ++k) {
            batch.push_back(t.store(kv::internal::store_op::set, key_of(k),
                                    std::string_view(value).substr(0, o.values(rng)), 0, 0, 0));
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
    std::string value(o.values.max(), 'v');
    std::uniform_real_distribution<double> coin(0, 1);
    // --zero-copy: PUTs from, GETs into this lane's registered buffers (the same bytes as `value`).
    net::rdma::buffer src, dst;
    if (o.zero_copy) {
        net::rdma::memory_pool& pool = net::rdma::shard_context::local().pool();
        src = pool.allocate(std::max<size_t>(o.values.max(), 1));
        std::memcpy(src.data(), value.data(), value.size());
        dst = pool.allocate(kv::get_into_capacity(key_of(0).size(), o.values.max()));
    }
    // The keys, formatted once (a key space of up to 64 Ki keys; larger ones per request): the
    // loop's work per request is the request's, as perftest's is the READ's alone.
    std::vector<std::string> keys(o.keys.size() <= 65536 ? o.keys.size() : 0);
    for (unsigned k = 0; k < keys.size(); ++k) {
        keys[k] = key_of(k);
    }
    auto pick_key = [&] {
        auto k = unsigned(o.keys(rng));
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
                                      net::rdma::span_of(src, 0, o.values(rng)), 0, 0, 0);
            } else {
                co_await t.store(kv::internal::store_op::set, std::move(key),
                                 std::string_view(value).substr(0, o.values(rng)), 0, 0, 0);
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
future<shard_part> run_shard(const bench_target& t, const kv_bench_options& o, unsigned s, unsigned shards,
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

/// Adds the shards' parts of a run to its result.
void add_parts(kv_result& r, const std::vector<shard_part>& done) {
    for (const auto& p : done) {
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
        r.cache.set_failures += p.set_failures;
        r.cache.wrong_values += p.wrong_values;
    }
}

future<kv_result> run_once(const bench_target& t, const kv_bench_options& o) {
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
    add_parts(r, done);
    if (cpu0 >= 0 && cpu1 >= 0) {
        // The warm-up's CPU is in the difference: scale it to the measured part.
        r.server_cpu_seconds = (cpu1 - cpu0) * o.duration.count() / (o.duration.count() + o.warmup.count());
    }
    co_return r;
}

// ---- The cache-client mode ----

/// Key `k`'s name written into `buf` (no allocation): the same text as key_of(k).
std::string_view key_name(char (&buf)[24], uint64_t k) {
    auto r = fmt::format_to_n(buf, sizeof(buf), "key:{:08}", k);
    return {buf, r.size};
}

/// One look-aside client connection: `requests` gets, `pipeline` at a time; the keys that missed
/// are then set (pipelined) with their values. Hits are checked byte for byte.
future<> cache_connection(net::socket_address addr, const kv_bench_options& o, const key_values& values,
                          uint64_t requests, uint64_t seed, shard_part& part) {
    auto s = co_await net::tcp::connect(addr);
    client c{s.input(), s.output(), {}, 0, std::mt19937_64(seed)};
    std::string req;
    std::vector<uint64_t> asked(o.pipeline), missed;
    char buf[24];
    for (uint64_t done = 0; done < requests;) {
        auto n = unsigned(std::min<uint64_t>(o.pipeline, requests - done));
        req.clear();
        for (unsigned i = 0; i < n; ++i) {
            asked[i] = o.keys(c.rng);
            req += "get ";
            req += key_name(buf, asked[i]);
            req += "\r\n";
        }
        co_await c.out.write(std::string_view(req));
        co_await c.out.flush();
        missed.clear();
        for (unsigned i = 0; i < n; ++i) {
            reply_info r = co_await c.reply(true);
            ++part.gets;
            ++part.keys_asked;
            if (r.error) {
                ++part.errors;
            } else if (r.values) {
                ++part.hits;
                std::string_view data =
                    std::string_view(c.rx).substr(c.rx_pos - r.bytes + r.value_at, r.value_len);
                part.wrong_values += !values.matches(asked[i], key_name(buf, asked[i]), data);
            } else {
                missed.push_back(asked[i]);
            }
        }
        done += n;
        if (missed.empty()) {
            continue;
        }
        req.clear();
        for (uint64_t k : missed) {
            std::string_view key = key_name(buf, k);
            req += "set ";
            req += key;
            fmt::format_to(std::back_inserter(req), " 0 0 {}\r\n", values.size_of(k));
            values.append(req, k, key);
            req += "\r\n";
        }
        co_await c.out.write(std::string_view(req));
        co_await c.out.flush();
        for (size_t i = 0; i < missed.size(); ++i) {
            reply_info r = co_await c.reply(false);
            ++part.sets;
            part.set_failures += r.error;
        }
    }
    co_await c.out.close();
}

/// One shard's connections of a cache-client round of `requests` gets (shared out evenly).
future<shard_part> cache_shard(const bench_target& t, const kv_bench_options& o, const key_values& values,
                               uint64_t requests, uint64_t round, unsigned s, unsigned shards) {
    shard_part part;
    std::vector<future<>> conns;
    for (unsigned id = s; id < o.connections; id += shards) {
        uint64_t share = requests * (id + 1) / o.connections - requests * id / o.connections;
        uint64_t seed = splitmix64(splitmix64(o.seed ^ (round << 32)) ^ id); // per round and connection
        conns.push_back(cache_connection(t.address, o, values, share, seed, part));
    }
    co_await when_all_succeed(std::move(conns));
    co_return part;
}

/// A cache-client round on every client shard; its counts added to `r`.
future<> cache_round(const bench_target& t, const kv_bench_options& o, const key_values& values,
                     uint64_t requests, uint64_t round, kv_result& r) {
    unsigned shards = shard_count();
    std::vector<future<shard_part>> parts;
    for (unsigned s = 0; s < shards; ++s) {
        parts.push_back(submit_to(s, [&t, &o, &values, requests, round, s, shards] {
            return cache_shard(t, o, values, requests, round, s, shards);
        }));
    }
    add_parts(r, co_await when_all_succeed(std::move(parts)));
}

/// The resident memory of process `pid` in bytes (VmRSS); -1 when unreadable.
int64_t process_rss_bytes(int pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(f, line);) {
        if (line.starts_with("VmRSS:")) {
            return int64_t(std::stoll(line.substr(6))) * 1024;
        }
    }
    return -1;
}

/// The server's `stats` (the counters a hit-ratio run reports) and RSS.
future<server_snapshot> snapshot(const bench_target& t) {
    auto s = co_await net::tcp::connect(t.address);
    client c{s.input(), s.output(), {}, 0, {}};
    co_await c.out.write(std::string_view("stats\r\n"));
    co_await c.out.flush();
    server_snapshot snap;
    for (;;) {
        reply_info r = co_await c.reply(false);
        std::string_view line = std::string_view(c.rx).substr(c.rx_pos - r.bytes, r.bytes);
        if (line.starts_with("END") || r.error) {
            break;
        }
        // STAT <name> <value>
        auto sp = line.find(' ', 5);
        if (!line.starts_with("STAT ") || sp == std::string_view::npos) {
            continue;
        }
        std::string_view name = line.substr(5, sp - 5);
        int64_t v = -1;
        std::from_chars(line.data() + sp + 1, line.data() + line.size(), v);
        const std::pair<std::string_view, int64_t*> fields[] = {{"evictions", &snap.evictions},
                                                                {"curr_items", &snap.curr_items},
                                                                {"bytes", &snap.bytes},
                                                                {"total_items", &snap.total_items},
                                                                {"limit_maxbytes", &snap.limit_maxbytes}};
        for (auto [field, to] : fields) {
            if (name == field) {
                *to = v;
            }
        }
    }
    co_await c.out.close();
    snap.rss_bytes = t.pid ? process_rss_bytes(t.pid) : -1;
    co_return snap;
}

/// Asks for the size of keys [first, last) (`mg <key> s`, 256 at a time): adds the keys found and
/// the sum of their key and value lengths.
future<> probe_range(net::socket_address addr, uint64_t first, uint64_t last, int64_t& items,
                     int64_t& bytes) {
    auto s = co_await net::tcp::connect(addr);
    client c{s.input(), s.output(), {}, 0, {}};
    std::string req;
    char buf[24];
    for (uint64_t k = first; k < last;) {
        uint64_t batch = std::min<uint64_t>(256, last - k);
        req.clear();
        for (uint64_t i = 0; i < batch; ++i) {
            req += "mg ";
            req += key_name(buf, k + i);
            req += " s\r\n";
        }
        co_await c.out.write(std::string_view(req));
        co_await c.out.flush();
        for (uint64_t i = 0; i < batch; ++i, ++k) {
            reply_info r = co_await c.reply(false);
            std::string_view line = std::string_view(c.rx).substr(c.rx_pos - r.bytes, r.bytes);
            // "HD s<size>" for a key held, "EN" for a miss.
            if (auto at = line.find(" s"); line.starts_with("HD") && at != std::string_view::npos) {
                int64_t size = 0;
                std::from_chars(line.data() + at + 2, line.data() + line.size(), size);
                ++items;
                bytes += int64_t(key_name(buf, k).size()) + size;
            } else if (!line.starts_with("EN")) {
                throw std::runtime_error(fmt::format("mg: unexpected reply '{}'", line));
            }
        }
    }
    co_await c.out.close();
}

/// The cache-client run against one target: warm-up rounds, the measured gets, the probe.
future<kv_result> run_cache(const bench_target& t, const kv_bench_options& o, const key_values& values) {
    kv_result r;
    r.target = t.name;
    r.cache.start = co_await snapshot(t);
    // Warm-up: rounds of a quarter of the key space (at least 10,000 gets), until one whole round
    // ran with the cache already evicting (full, in its steady state), or warmup_max x keys gets.
    const uint64_t limit = uint64_t(o.warmup_max * double(o.keys.size()));
    const uint64_t round_size = std::max<uint64_t>(10000, o.keys.size() / 4);
    uint64_t round = 0;
    kv_result warm;
    for (bool full = false; warm.gets < limit; ++round) {
        co_await cache_round(t, o, values, std::min(round_size, limit - warm.gets), round, warm);
        if (full) {
            break;
        }
        server_snapshot now = co_await snapshot(t);
        full = now.evictions > r.cache.start.evictions;
    }
    r.cache.warmup_gets = warm.gets;
    r.cache.wrong_values = warm.cache.wrong_values; // a wrong value is wrong in any phase
    r.cache.measured = co_await snapshot(t);
    auto t0 = clock_type::now();
    co_await cache_round(t, o, values, o.requests, uint64_t(1) << 31, r);
    r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    r.cache.end = co_await snapshot(t);
    r.errors += warm.errors;
    if (o.probe) {
        r.cache.live_items = r.cache.live_bytes = 0;
        std::vector<future<>> probes;
        const uint64_t n = o.keys.size(), parts = 4;
        for (uint64_t i = 0; i < parts; ++i) {
            probes.push_back(probe_range(t.address, n * i / parts, n * (i + 1) / parts, r.cache.live_items,
                                         r.cache.live_bytes));
        }
        co_await when_all_succeed(std::move(probes));
    }
    co_return r;
}

} // namespace

future<std::vector<kv_result>> run_kv_bench(kv_bench_options opts) {
    if (opts.mode == kv_mode::cache) {
        const key_values values(opts.values, opts.seed);
        std::vector<kv_result> out;
        for (const auto& t : opts.targets) {
            out.push_back(co_await run_cache(t, opts, values));
        }
        co_return out;
    }
    if (opts.preload) {
        for (const auto& t : opts.targets) {
            std::vector<future<>> loads;
            auto keys = unsigned(opts.keys.size());
            unsigned n = std::max(1u, std::min(8u, keys / 1000 + 1));
            for (unsigned i = 0; i < n; ++i) {
                unsigned first = unsigned(uint64_t(keys) * i / n),
                         last = unsigned(uint64_t(keys) * (i + 1) / n);
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

/// Mebibytes, or "-" when not measured.
std::string mib(int64_t bytes) {
    return bytes < 0 ? "-" : fmt::format("{:.1f}", double(bytes) / (1 << 20));
}

/// The difference of two counters, or -1 when either is unknown.
int64_t delta(int64_t before, int64_t after) {
    return before < 0 || after < 0 ? -1 : after - before;
}

/// The cache-client run as a table.
std::string format_cache_table(const std::vector<kv_result>& results, const kv_bench_options& o) {
    std::string s = fmt::format(
        "cache client (get, set on a miss): {} keys ({}), values {} B (mean {:.0f}), {} connections, "
        "pipeline {}, {} measured gets after the warm-up, seed {}\n\n",
        o.keys.size(), o.keys.describe(), o.values.describe(), o.values.mean(), o.connections, o.pipeline,
        o.requests, o.seed);
    s += "| target | hit ratio | misses | sets | set failures | wrong values | warm-up gets | evictions "
         "warm-up / "
         "measured | items | RSS MiB idle / end | live key+value MiB | overhead B/item (all RSS / above "
         "idle) |\n";
    s += "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
    for (const auto& r : results) {
        const cache_result& c = r.cache;
        s += fmt::format("| {} | {:.4f} | {} | {} | {} | {} | {} | {} / {} | {} | {} / {} | {} | {} |\n",
                         r.target, r.hit_ratio(), r.keys_asked - r.hits, r.sets, c.set_failures,
                         c.wrong_values, c.warmup_gets, delta(c.start.evictions, c.measured.evictions),
                         c.measured_evictions(), c.end.curr_items, mib(c.start.rss_bytes),
                         mib(c.end.rss_bytes), mib(c.live_bytes),
                         c.overhead_per_item() < 0 ? "-"
                                                   : fmt::format("{:.0f} / {:.0f}", c.overhead_per_item(),
                                                                 c.overhead_above_idle()));
        if (r.errors) {
            s += fmt::format("\n{}: {} error replies to gets\n", r.target, r.errors);
        }
    }
    s += "\noverhead B/item = (RSS at the end - the live items' key and value bytes) / live items (above "
         "idle:\n"
         "minus the RSS before the warm-up too); live items and bytes: every key asked for its size\n"
         "(mg <key> s) after the run.\n";
    return s;
}

/// The cache-client run as JSON.
std::string format_cache_json(const std::vector<kv_result>& results, const kv_bench_options& o) {
    std::string s = fmt::format(
        "{{\n  \"mode\": \"cache\", \"keys\": {}, \"key_dist\": \"{}\", \"value_size\": \"{}\", "
        "\"value_mean\": {:.1f}, \"connections\": {}, \"pipeline\": {}, \"requests\": {}, \"seed\": {},\n"
        "  \"results\": [\n",
        o.keys.size(), o.keys.describe(), o.values.describe(), o.values.mean(), o.connections, o.pipeline,
        o.requests, o.seed);
    for (size_t i = 0; i < results.size(); ++i) {
        const auto& r = results[i];
        const cache_result& c = r.cache;
        s += fmt::format(
            "    {{\"target\": \"{}\", \"gets\": {}, \"hits\": {}, \"misses\": {}, \"hit_ratio\": {:.6f}, "
            "\"sets\": {}, \"set_failures\": {}, \"wrong_values\": {}, \"errors\": {}, \"warmup_gets\": {}, "
            "\"evictions_warmup\": {}, \"evictions_measured\": {}, \"curr_items\": {}, \"bytes\": {}, "
            "\"limit_maxbytes\": {}, \"rss_idle_bytes\": {}, \"rss_bytes\": {}, \"live_items\": {}, "
            "\"live_bytes\": {}, \"overhead_per_item\": {:.1f}, \"overhead_above_idle\": {:.1f}, "
            "\"seconds\": {:.3f}}}{}\n",
            r.target, r.gets, r.hits, r.keys_asked - r.hits, r.hit_ratio(), r.sets, c.set_failures,
            c.wrong_values, r.errors, c.warmup_gets, delta(c.start.evictions, c.measured.evictions),
            c.measured_evictions(), c.end.curr_items, c.end.bytes, c.end.limit_maxbytes, c.start.rss_bytes,
            c.end.rss_bytes, c.live_items, c.live_bytes, c.overhead_per_item(), c.overhead_above_idle(),
            r.seconds, i + 1 < results.size() ? "," : "");
    }
    s += "  ]\n}\n";
    return s;
}

} // namespace

std::string format_kv_table(const std::vector<kv_result>& results, const kv_bench_options& o) {
    if (o.mode == kv_mode::cache) {
        return format_cache_table(results, o);
    }
    std::string s = fmt::format(
        "{}keys {}, values {} B, {:.0f}% gets x{} keys, {} connections, pipeline {}, {:.1f} s\n\n",
        o.transport == kv_transport::rdma
            ? fmt::format("rdma{}, ", o.location_cache ? "" : " (no location cache)")
            : std::string(),
        fmt::format("{} ({})", o.keys.size(), o.keys.describe()), o.values.describe(), o.get_ratio * 100,
        o.multiget, o.connections, o.pipeline, o.duration.count());
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
    if (o.mode == kv_mode::cache) {
        return format_cache_json(results, o);
    }
    std::string s = "{\n";
    s += fmt::format(
        "  \"keys\": {}, \"value_min\": {}, \"value_max\": {}, \"get_ratio\": {}, \"multiget\": {}, "
        "\"connections\": {}, \"pipeline\": {}, \"seconds\": {},\n  \"results\": [\n",
        o.keys.size(), o.values.min(), o.values.max(), o.get_ratio, o.multiget, o.connections, o.pipeline,
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
