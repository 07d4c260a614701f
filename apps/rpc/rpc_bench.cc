#include "apps/rpc/rpc_bench.hh"

#include "apps/common/svg_chart.hh"
#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "core/smp.hh"
#include "rpc/client.hh"

#include <map>
#include <memory>

namespace shoal::rpc_bench {

rpc::attachment echo(rpc::attachment payload) {
    return payload;
}

std::string_view echo_string(std::string_view payload) {
    return payload;
}

void register_verbs(rpc::server& s) {
    s.register_handler<&echo, &echo_string>();
}

namespace {

/// What one shard measured in one cell.
struct shard_result {
    uint64_t requests = 0;
    uint64_t errors = 0;
    echo::histogram latency_ns;
};

/// One caller: calls back to back until `end`, recording the calls that complete between
/// `measure_from` and `end`.
future<> caller(rpc::client& c, const net::temporary_buffer& payload, bool string_payload,
                steady_clock_type::time_point measure_from, steady_clock_type::time_point end,
                shard_result& r) {
    while (steady_clock_type::now() < end) {
        auto t0 = steady_clock_type::now();
        bool ok = false;
        try {
            if (string_payload) {
                std::string back = co_await c.call<&echo_string>(payload.view());
                ok = back.size() == payload.size() && back == payload.view();
            } else {
                rpc::attachment back = co_await c.call<&echo>(rpc::attachment(payload.share()));
                ok = back.size() == payload.size() &&
                     (payload.empty() || (back.view().front() == payload.view().front() &&
                                          back.view().back() == payload.view().back()));
            }
        } catch (...) {
        }
        auto t1 = steady_clock_type::now();
        if (t1 >= measure_from && t1 <= end) { // completions inside the measured window
            if (ok) {
                ++r.requests;
                r.latency_ns.record(
                    uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
            } else {
                ++r.errors;
            }
        }
        if (!ok && !c.connected()) {
            co_return;
        }
    }
}

future<shard_result> run_shard(net::transport t, net::socket_address server, size_t size, unsigned callers,
                               unsigned connections, bool string_payload, const options& o,
                               steady_clock_type::duration warmup, steady_clock_type::duration duration) {
    shard_result r;
    if (callers == 0) {
        co_return r;
    }
    std::vector<std::unique_ptr<rpc::client>> clients;
    for (unsigned i = 0; i < std::min(callers, std::max(connections, 1u)); ++i) {
        rpc::client_options co;
        co.max_frame_size = std::max<size_t>(co.max_frame_size, size + 4096);
        co.rdma_messages = o.rdma_messages;
        co.rdma = o.rdma;
        clients.push_back(std::make_unique<rpc::client>(t, co));
        co_await clients.back()->connect(server);
    }
    net::temporary_buffer payload(size);
    for (size_t i = 0; i < size; ++i) {
        payload.get_write()[i] = char('a' + i % 26);
    }
    auto measure_from = steady_clock_type::now() + warmup;
    auto end = measure_from + duration;
    std::vector<future<>> running;
    for (unsigned i = 0; i < callers; ++i) {
        running.push_back(
            caller(*clients[i % clients.size()], payload, string_payload, measure_from, end, r));
    }
    co_await when_all(std::move(running));
    for (auto& c : clients) {
        co_await c->close();
    }
    co_return r;
}

} // namespace

future<std::vector<echo::cell_result>> run(net::transport t, options o) {
    std::vector<echo::cell_result> cells;
    auto warmup = std::chrono::duration_cast<steady_clock_type::duration>(o.warmup);
    auto duration = std::chrono::duration_cast<steady_clock_type::duration>(o.duration);
    for (size_t size : o.sizes) {
        for (unsigned c : o.concurrency) {
            std::vector<future<shard_result>> shards;
            unsigned n = shard_count();
            for (unsigned s = 0; s < n; ++s) {
                unsigned callers = c / n + (s < c % n ? 1 : 0);
                shards.push_back(submit_to(s, [=] {
                    return run_shard(t, o.server, size, callers, o.connections_per_shard, o.string_payload, o,
                                     warmup, duration);
                }));
            }
            echo::cell_result cell;
            cell.target = o.label;
            cell.size = size;
            cell.concurrency = c;
            cell.seconds = o.duration.count();
            cell.warmup_seconds = o.warmup.count();
            for (auto& r : co_await when_all_succeed(std::move(shards))) {
                cell.requests += r.requests;
                cell.errors += r.errors;
                cell.latency_ns.merge(r.latency_ns);
            }
            cells.push_back(std::move(cell));
        }
    }
    co_return cells;
}

std::string chart(const std::vector<echo::cell_result>& cells, const std::string& title) {
    apps::panel qps{"QPS", "concurrency", "calls per second", {}, true, true};
    apps::panel p99{"P99 latency", "concurrency", "microseconds", {}, true, true};
    std::map<size_t, size_t> line_of; // size -> line index, in first-seen order
    for (const auto& c : cells) {
        auto [it, fresh] = line_of.try_emplace(c.size, qps.lines.size());
        if (fresh) {
            qps.lines.push_back({echo::format_size(c.size), {}});
            p99.lines.push_back({echo::format_size(c.size), {}});
        }
        qps.lines[it->second].points.emplace_back(c.concurrency, c.qps());
        p99.lines[it->second].points.emplace_back(c.concurrency, double(c.latency_ns.percentile(99)) / 1000);
    }
    return apps::svg_chart(title, {qps, p99});
}

} // namespace shoal::rpc_bench
