// The HTTP server of net/http with the Prometheus route, over real loopback TCP: scrapes gather
// every shard; bad requests get their status, close the connection, and reach no other shard.
#include "../tcp/test_util.hh"
#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "core/log.hh"
#include "core/metrics.hh"
#include "core/smp.hh"
#include "core/timer.hh"
#include "net/http/prometheus.hh"
#include "net/http/server.hh"
#include "net/tcp/tcp.hh"
#include "support/run.hh"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::net;
using namespace std::chrono_literals;
using shoal::testing::run_in_shards;

namespace {

/// Sends `request`, half-closes, and returns everything the server sent until it closed.
future<std::string> exchange_unbounded(socket_address addr, std::string request) {
    connected_socket s = co_await tcp::connect(addr);
    auto in = s.input();
    auto out = s.output();
    co_await out.write(request);
    co_await out.close();
    std::string got;
    for (;;) {
        temporary_buffer b = co_await in.read();
        if (b.empty()) {
            break;
        }
        got.append(b.get(), b.size());
    }
    co_return got;
}

/// `exchange_unbounded`, failing after 10 s.
future<std::string> exchange(socket_address addr, std::string request) {
    return with_timeout(steady_clock_type::now() + 10s, exchange_unbounded(addr, std::move(request)));
}

/// The status code of the first response in `text`, or -1.
int status_of(const std::string& text) {
    if (text.size() < 12 || !text.starts_with("HTTP/1.1 ")) {
        return -1;
    }
    return std::stoi(text.substr(9, 3));
}

/// Times the shard-1 probe metric was collected, on shard 1.
thread_local uint64_t tl_probe_reads = 0;

/// A server on shard 0 with the Prometheus route, and a probe metric on shard 1 that counts
/// how often a scrape reached that shard.
struct fixture {
    std::unique_ptr<http::server> srv;
    std::unique_ptr<metrics::metric_group> probe; // lives on shard 1

    future<> start(http::server_limits limits = {}) {
        co_await submit_to(1, [this] {
            tl_probe_reads = 0;
            probe = std::make_unique<metrics::metric_group>();
            probe->add_counter("test_probe_reads_total", "Collections that reached shard 1.",
                               []() -> std::optional<double> { return double(++tl_probe_reads); });
        });
        srv = std::make_unique<http::server>(limits);
        http::add_prometheus_route(*srv);
        srv->start(socket_address::parse("127.0.0.1:0"));
    }
    future<uint64_t> probe_reads() {
        return submit_to(1, [] { return tl_probe_reads; });
    }
    future<> stop() {
        co_await srv->stop();
        co_await submit_to(1, [this] { probe.reset(); });
    }
};

} // namespace

TEST(http_server, scrape_gathers_every_shard) {
    int rc = run_in_shards(2, []() -> future<> {
        fixture f;
        co_await f.start();
        std::string r = co_await exchange(f.srv->local_address(),
                                          "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        EXPECT_EQ(status_of(r), 200) << r;
        EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << r;
        EXPECT_NE(r.find("# TYPE test_probe_reads_total counter\n"), std::string::npos) << r;
        EXPECT_NE(r.find("test_probe_reads_total{shard=\"1\"} 1\n"), std::string::npos) << r;
        // Content-Length matches the body.
        size_t body_at = r.find("\r\n\r\n") + 4;
        size_t cl = r.find("Content-Length: ");
        EXPECT_EQ(std::stoul(r.substr(cl + 16)), r.size() - body_at);
        EXPECT_EQ(co_await f.probe_reads(), 1u);
        co_await f.stop();
    });
    EXPECT_EQ(rc, 0);
}

TEST(http_server, keep_alive_serves_pipelined_requests_in_order) {
    int rc = run_in_shards(2, []() -> future<> {
        fixture f;
        co_await f.start();
        std::string r = co_await exchange(f.srv->local_address(), "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n"
                                                                  "GET /nope HTTP/1.1\r\nHost: t\r\n\r\n");
        size_t second = r.find("HTTP/1.1 404");
        EXPECT_EQ(status_of(r), 200) << r;
        EXPECT_NE(second, std::string::npos) << r;
        EXPECT_LT(r.find("test_probe_reads_total{shard=\"1\"} 1\n"), second);
        EXPECT_EQ(co_await f.probe_reads(), 1u);
        co_await f.stop();
    });
    EXPECT_EQ(rc, 0);
}

TEST(http_server, bad_requests_get_their_status_and_never_reach_the_shards) {
    int rc = run_in_shards(2, []() -> future<> {
        fixture f;
        co_await f.start({.max_head_bytes = 1024});
        struct bad_case {
            std::string request;
            int status;
            const char* must_contain;
        };
        const bad_case cases[] = {
            {"GET /other HTTP/1.1\r\nHost: t\r\n\r\n", 404, "no such path"},
            {"POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc", 405, "Allow: GET\r\n"},
            {"DELETE /metrics HTTP/1.1\r\nHost: t\r\n\r\n", 405, "Allow: GET\r\n"},
            {"GET /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc", 400, "bodies"},
            {"GARBAGE\r\n\r\n", 400, "malformed request line"},
            {"GET /metrics HTTP/1.1\r\n\r\n", 400, "without Host"},
            {std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 15), 400,
             "malformed"}, // TLS hello
            {"GET /metrics HTTP/2.0\r\nHost: t\r\n\r\n", 505, "HTTP/1.x"},
            {"GET /metrics HTTP/1.1\r\nHost: t\r\nX: " + std::string(2000, 'x') + "\r\n\r\n", 431, "longer"},
            {"GET /metrics HTTP/1.1\r\nHost: t\r\nX: " + std::string(2000, 'x'), 431, "longer"}, // never ends
        };
        for (const auto& c : cases) {
            std::string r = co_await exchange(f.srv->local_address(), c.request);
            EXPECT_EQ(status_of(r), c.status) << c.request << "\n--- got:\n" << r;
            EXPECT_NE(r.find(c.must_contain), std::string::npos) << r;
            EXPECT_NE(r.find("Connection: close\r\n"), std::string::npos) << r;
        }
        // A request that stops half-way is dropped without an answer.
        std::string r = co_await exchange(f.srv->local_address(), "GET /metr");
        EXPECT_EQ(r, "");
        EXPECT_EQ(co_await f.probe_reads(), 0u);
        EXPECT_EQ(f.srv->errors(), std::size(cases));
        // And the server still serves.
        r = co_await exchange(f.srv->local_address(), "GET /metrics HTTP/1.0\r\n\r\n");
        EXPECT_EQ(status_of(r), 200) << r;
        EXPECT_EQ(co_await f.probe_reads(), 1u);
        co_await f.stop();
    });
    EXPECT_EQ(rc, 0);
}

TEST(http_server, connections_over_the_limit_get_503_when_none_waits_for_a_head) {
    int rc = run_in_shards(2, []() -> future<> {
        // A route whose handler waits until the test lets it answer: its connection is busy.
        // Only the first request may reach it; a second would mean the busy connection was
        // taken for one still waiting for its head.
        promise<> release;
        int entered = 0;
        http::server srv({.max_connections = 1});
        srv.add_route("GET", "/slow", [&](const http::request&) -> future<http::response> {
            if (++entered == 1) {
                co_await release.get_future();
            }
            co_return http::response{};
        });
        srv.start(socket_address::parse("127.0.0.1:0"));
        auto busy = exchange(srv.local_address(), "GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
        // Wait until the handler holds the connection: before that it waits for a head, and a
        // new connection would rightly take its place.
        for (int i = 0; i < 90000 && entered == 0; ++i) {
            co_await sleep(1ms);
        }
        EXPECT_EQ(entered, 1);
        std::string r = co_await exchange(srv.local_address(), "GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
        EXPECT_EQ(status_of(r), 503) << r;
        EXPECT_EQ(entered, 1);
        release.set_value();
        r = co_await std::move(busy);
        EXPECT_EQ(status_of(r), 200) << r;
        EXPECT_EQ(srv.evicted(), 0u);
        co_await srv.stop();
    });
    EXPECT_EQ(rc, 0);
}

namespace {

using tcp_test::read_to_end;

/// Reads `s` until the server closes it; the bytes it sent. Fails after 10 s.
future<std::string> read_until_closed(connected_socket& s) {
    auto in = std::make_unique<input_stream>(s.input());
    auto& stream = *in;
    return with_timeout(steady_clock_type::now() + 10s, read_to_end(stream).finally([in = std::move(in)] {}));
}

} // namespace

TEST(http_server, a_client_that_never_sends_is_closed_after_the_idle_timeout) {
    int rc = run_in_shards(2, []() -> future<> {
        fixture f;
        co_await f.start({.idle_timeout = 200ms});
        auto started = steady_clock_type::now();
        connected_socket silent = co_await tcp::connect(f.srv->local_address());
        connected_socket half = co_await tcp::connect(f.srv->local_address());
        auto out = half.output();
        co_await out.write("GET /metr"); // begins a request, never finishes it
        co_await out.flush();
        EXPECT_EQ(co_await read_until_closed(silent), "");
        EXPECT_EQ(co_await read_until_closed(half), "") << "no answer to an unfinished request";
        EXPECT_GE(steady_clock_type::now() - started, 200ms);
        EXPECT_EQ(f.srv->idle_closed(), 2u);
        EXPECT_EQ(f.srv->errors(), 0u);
        // A client that keeps its connection open after a response is closed too.
        connected_socket kept = co_await tcp::connect(f.srv->local_address());
        auto kout = kept.output();
        co_await kout.write("GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
        co_await kout.flush();
        std::string r = co_await read_until_closed(kept);
        EXPECT_EQ(status_of(r), 200) << r;
        EXPECT_EQ(f.srv->idle_closed(), 3u);
        EXPECT_EQ(co_await f.probe_reads(), 1u);
        co_await f.stop();
    });
    EXPECT_EQ(rc, 0);
}

TEST(http_server, silent_clients_at_the_connection_cap_lose_their_places_to_fresh_scrapes) {
    int rc = run_in_shards(2, []() -> future<> {
        fixture f;
        // The idle timeout is far away: only making room can close the silent clients in time.
        co_await f.start({.max_connections = 2, .idle_timeout = 60s});
        connected_socket a = co_await tcp::connect(f.srv->local_address());
        connected_socket b = co_await tcp::connect(f.srv->local_address());
        // The cap is full of clients that never send: a scrape takes the oldest one's place.
        std::string r = co_await exchange(f.srv->local_address(), "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
        EXPECT_EQ(status_of(r), 200) << r;
        EXPECT_EQ(co_await read_until_closed(a), "");
        // Full again (b, then c): the next scrape takes b's.
        connected_socket c = co_await tcp::connect(f.srv->local_address());
        for (int i = 0; i < 10000 && f.srv->connections() < 2; ++i) {
            co_await sleep(1ms);
        }
        r = co_await exchange(f.srv->local_address(), "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
        EXPECT_EQ(status_of(r), 200) << r;
        EXPECT_EQ(co_await read_until_closed(b), "");
        EXPECT_EQ(co_await f.probe_reads(), 2u);
        EXPECT_EQ(f.srv->evicted(), 2u);
        EXPECT_EQ(f.srv->idle_closed(), 0u);
        c.abort();
        co_await f.stop();
    });
    EXPECT_EQ(rc, 0);
}

namespace {

/// A client that sends a request head one byte per `gap`, never finishing it, for up to 30 s.
/// Resolves with true when the server closed the connection meanwhile.
future<bool> slow_head(socket_address addr, steady_clock_type::duration gap) {
    connected_socket s = co_await tcp::connect(addr);
    auto in = std::make_unique<input_stream>(s.input());
    auto out = s.output();
    bool closed = false;
    auto reading = tcp_test::read_to_end(*in).then_wrapped([&closed](future<std::string> f) {
        f.ignore_ready_future();
        closed = true;
    });
    try {
        co_await out.write("GET /metrics HTTP/1.1\r\nHost: t\r\nX-Slow: ");
        co_await out.flush();
        auto end = steady_clock_type::now() + 30s;
        while (!closed && steady_clock_type::now() < end) {
            co_await out.write("a");
            co_await out.flush();
            co_await sleep(gap);
        }
    } catch (...) {
        // The server closed it: a write failed.
    }
    const bool by_server = closed || !reading.available();
    if (!closed) {
        s.abort();
    }
    co_await std::move(reading);
    co_return by_server;
}

} // namespace

TEST(http_server, slow_heads_cannot_starve_scrapes) {
    int rc = run_in_shards(2, []() -> future<> {
        fixture f;
        constexpr size_t cap = 4;
        co_await f.start({.max_connections = cap, .idle_timeout = 60s, .head_timeout = 300ms});
        // cap + 1 clients trickle request heads a byte at a time, each byte well within the
        // idle timeout: only the deadline of a whole head (or making room) ends them.
        std::vector<future<bool>> slow;
        for (size_t i = 0; i <= cap; ++i) {
            slow.push_back(slow_head(f.srv->local_address(), 20ms));
        }
        for (int i = 0; i < 10000 && f.srv->connections() < cap; ++i) {
            co_await sleep(1ms);
        }
        std::string r = co_await exchange(f.srv->local_address(), "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
        EXPECT_EQ(status_of(r), 200) << r;
        size_t closed = 0;
        for (auto& c : slow) {
            closed += (co_await std::move(c)) ? 1 : 0;
        }
        EXPECT_EQ(closed, cap + 1) << "slow clients the server never closed";
        EXPECT_EQ(f.srv->head_timeouts() + f.srv->evicted(), cap + 1);
        EXPECT_GE(f.srv->head_timeouts(), 1u);
        EXPECT_EQ(f.srv->idle_closed(), 0u);
        // And later scrapes are served too.
        r = co_await exchange(f.srv->local_address(), "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
        EXPECT_EQ(status_of(r), 200) << r;
        for (int i = 0; i < 10000 && f.srv->connections() > 0; ++i) {
            co_await sleep(1ms);
        }
        EXPECT_EQ(f.srv->connections(), 0u) << "connections left behind";
        co_await f.stop();
    });
    EXPECT_EQ(rc, 0);
}
