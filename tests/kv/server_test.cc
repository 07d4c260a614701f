// shoal-kv's server on loopback: keys spread over shards and a multi-get across them, CAS races
// between connections, 1,000 concurrent connections, a client killed in the middle of a value,
// a client that never reads (throttled, memory bounded; stop aborts it in bounded time),
// expiry driven by a clock the test sets, and eviction under a small memory limit.
#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "core/sharded.hh"
#include "core/smp.hh"
#include "core/timer.hh"
#include "kv/server/server.hh"
#include "net/tcp/tcp.hh"
#include "tests/kv/kv_test_util.hh"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <string>

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

using namespace shoal;
using namespace shoal::net;
using shoal::kv_test::run_in_shards;
using shoal::kv_test::test_server;

namespace {

/// A blocking-style text-protocol client on a shard.
struct client {
    input_stream in;
    output_stream out;
    std::string rx;

    static future<std::unique_ptr<client>> connect(socket_address a) {
        auto s = co_await tcp::connect(a);
        auto c = std::make_unique<client>();
        c->in = s.input();
        c->out = s.output();
        co_return c;
    }
    future<> send(std::string_view req) {
        co_await out.write(req);
        co_await out.flush();
    }
    /// Reads until `rx` ends with `suffix` (bounded by the connection ending).
    future<std::string> until(std::string_view suffix) {
        while (!(rx.size() >= suffix.size() &&
                 rx.compare(rx.size() - suffix.size(), suffix.size(), suffix) == 0)) {
            auto b = co_await in.read();
            if (b.empty()) {
                throw std::runtime_error("connection closed; got: " + rx.substr(0, 200));
            }
            rx.append(b.view());
        }
        std::string r = std::move(rx);
        rx.clear();
        co_return r;
    }
    /// Reads `n` one-line replies; returns them concatenated.
    future<std::string> lines(size_t n) {
        std::string all;
        while (size_t(std::count(all.begin(), all.end(), '\n')) < n) {
            all += co_await until("\r\n");
        }
        co_return all;
    }
    future<std::string> call(std::string_view req, std::string_view suffix = "\r\n") {
        co_await send(req);
        co_return co_await until(suffix);
    }
};

std::string set_req(std::string_view key, std::string_view value) {
    return fmt::format("set {} 0 0 {}\r\n{}\r\n", key, value.size(), value);
}

/// Increments "counter" `increments` times with gets + cas, retrying on EXISTS; adds the
/// conflicts it saw to `*conflicts`. (A named coroutine: its parameters live in its frame.)
future<> cas_client(socket_address addr, int increments, std::atomic<uint64_t>* conflicts) {
    auto c = co_await client::connect(addr);
    for (int done = 0; done < increments;) {
        std::string r = co_await c->call("gets counter\r\n", "END\r\n");
        // VALUE counter 0 <len> <cas>\r\n<n>\r\nEND
        auto head = r.substr(0, r.find("\r\n"));
        uint64_t cas = std::stoull(head.substr(head.rfind(' ') + 1));
        auto body = r.substr(r.find("\r\n") + 2);
        uint64_t n = std::stoull(body.substr(0, body.find("\r\n")));
        auto v = std::to_string(n + 1);
        auto reply = co_await c->call(fmt::format("cas counter 0 0 {} {}\r\n{}\r\n", v.size(), cas, v));
        if (reply == "STORED\r\n") {
            ++done;
        } else if (reply == "EXISTS\r\n") {
            ++*conflicts;
        } else {
            throw std::runtime_error("unexpected reply " + reply);
        }
    }
    co_await c->out.close();
}

long rss_kb() {
    std::ifstream f("/proc/self/statm");
    long pages = 0, resident = 0;
    f >> pages >> resident;
    return resident * 4;
}

} // namespace

TEST(kv_server, multi_get_across_shards) {
    EXPECT_EQ(run_in_shards(2,
                            []() -> future<> {
                                test_server ts;
                                co_await ts.start();
                                auto c = co_await client::connect(ts.addr);
                                std::string sets, get = "get", expect;
                                for (int i = 0; i < 100; ++i) {
                                    auto k = fmt::format("key{}", i);
                                    sets += set_req(k, fmt::format("value{}", i));
                                    get += " " + k;
                                    expect += fmt::format("VALUE {} 0 {}\r\nvalue{}\r\n", k,
                                                          fmt::format("value{}", i).size(), i);
                                }
                                std::string stored;
                                for (int i = 0; i < 100; ++i) {
                                    stored += "STORED\r\n";
                                }
                                co_await c->send(sets);
                                EXPECT_EQ(co_await c->lines(100), stored);
                                EXPECT_EQ(co_await c->call(get + "\r\n", "END\r\n"), expect + "END\r\n")
                                    << "every key, in request order, whichever shard owns it";
                                auto items0 = co_await ts.servers.invoke_on(
                                    0, [](kv::server& s) { return s.store().stats().curr_items; });
                                auto items1 = co_await ts.servers.invoke_on(
                                    1, [](kv::server& s) { return s.store().stats().curr_items; });
                                EXPECT_EQ(items0 + items1, 100u);
                                EXPECT_GT(items0, 20u);
                                EXPECT_GT(items1, 20u);
                                co_await c->out.close();
                                co_await ts.stop();
                            }),
              0);
}

TEST(kv_server, cas_races_between_connections) {
    EXPECT_EQ(
        run_in_shards(
            2,
            []() -> future<> {
                test_server ts;
                co_await ts.start();
                auto c0 = co_await client::connect(ts.addr);
                EXPECT_EQ(co_await c0->call(set_req("counter", "0")), "STORED\r\n");
                constexpr int clients = 8, increments = 25;
                std::atomic<uint64_t> conflicts{0};
                std::vector<future<>> all;
                for (int i = 0; i < clients; ++i) {
                    all.push_back(submit_to(unsigned(i) % shard_count(), [addr = ts.addr, &conflicts] {
                        return cas_client(addr, increments, &conflicts);
                    }));
                }
                co_await when_all_succeed(std::move(all));
                EXPECT_EQ(co_await c0->call("get counter\r\n", "END\r\n"),
                          fmt::format("VALUE counter 0 3\r\n{}\r\nEND\r\n", clients * increments))
                    << "no increment lost";
                auto st = co_await c0->call("stats\r\n", "END\r\n");
                EXPECT_NE(st.find(fmt::format("STAT cas_hits {}\r\n", clients * increments)),
                          std::string::npos);
                EXPECT_NE(st.find(fmt::format("STAT cas_badval {}\r\n", conflicts.load())), std::string::npos)
                    << conflicts.load() << " conflicts seen by the clients; " << st;
                co_await c0->out.close();
                co_await ts.stop();
            }),
        0);
}

TEST(kv_server, a_thousand_concurrent_connections) {
    rlimit lim{};
    getrlimit(RLIMIT_NOFILE, &lim);
    if (lim.rlim_cur < 2200) {
        lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 4096);
        setrlimit(RLIMIT_NOFILE, &lim);
    }
    if (lim.rlim_cur < 2200) {
        GTEST_SKIP() << "RLIMIT_NOFILE " << lim.rlim_cur << " is below the 2,200 this test needs";
    }
    EXPECT_EQ(run_in_shards(2,
                            []() -> future<> {
                                test_server ts;
                                kv::server_config cfg;
                                cfg.max_connections = 1100;
                                co_await ts.start(cfg);
                                constexpr int n = 1000;
                                std::vector<std::unique_ptr<client>> conns;
                                for (int i = 0; i < n; ++i) {
                                    conns.push_back(co_await client::connect(ts.addr));
                                }
                                // All open at once: each stores and reads back its own key.
                                std::vector<future<>> work;
                                for (int i = 0; i < n; ++i) {
                                    work.push_back([](client& c, int i) -> future<> {
                                        auto k = fmt::format("c{}", i);
                                        auto r = co_await c.call(set_req(k, k));
                                        if (r != "STORED\r\n") {
                                            throw std::runtime_error("set: " + r);
                                        }
                                        r = co_await c.call("get " + k + "\r\n", "END\r\n");
                                        if (r !=
                                            fmt::format("VALUE {} 0 {}\r\n{}\r\nEND\r\n", k, k.size(), k)) {
                                            throw std::runtime_error("get: " + r);
                                        }
                                    }(*conns[size_t(i)], i));
                                }
                                co_await when_all_succeed(std::move(work));
                                auto st = co_await conns[0]->call("stats\r\n", "END\r\n");
                                EXPECT_NE(st.find("STAT curr_connections 1000\r\n"), std::string::npos);
                                EXPECT_NE(st.find("STAT curr_items 1000\r\n"), std::string::npos);
                                for (auto& c : conns) {
                                    co_await c->out.close();
                                }
                                co_await ts.stop();
                            }),
              0);
}

TEST(kv_server, connections_past_the_limit_get_memcacheds_error) {
    EXPECT_EQ(run_in_shards(1,
                            []() -> future<> {
                                test_server ts;
                                kv::server_config cfg;
                                cfg.max_connections = 2;
                                co_await ts.start(cfg);
                                auto a = co_await client::connect(ts.addr);
                                auto b = co_await client::connect(ts.addr);
                                EXPECT_EQ(co_await a->call("version\r\n"), "VERSION 1.6.18\r\n");
                                EXPECT_EQ(co_await b->call("version\r\n"), "VERSION 1.6.18\r\n");
                                auto c = co_await client::connect(ts.addr);
                                EXPECT_EQ(co_await c->until("\r\n"), "ERROR Too many open connections\r\n");
                                co_await a->out.close();
                                co_await b->out.close();
                                co_await ts.stop();
                            }),
              0);
}

TEST(kv_server, client_killed_mid_value) {
    EXPECT_EQ(run_in_shards(1,
                            []() -> future<> {
                                test_server ts;
                                co_await ts.start();
                                auto c = co_await client::connect(ts.addr);
                                EXPECT_EQ(co_await c->call(set_req("k", "old")), "STORED\r\n");
                                {
                                    auto s = co_await tcp::connect(ts.addr);
                                    auto out = s.output();
                                    co_await out.write("set k 0 0 100\r\n" + std::string(50, 'x'));
                                    co_await out.flush();
                                    co_await sleep(std::chrono::milliseconds(50));
                                    s.abort(); // gone, half a value sent
                                }
                                // The half value is dropped; the old one stays; the server serves on.
                                auto deadline = steady_clock_type::now() + std::chrono::seconds(60);
                                std::string st;
                                do {
                                    co_await sleep(std::chrono::milliseconds(10));
                                    st = co_await c->call("stats\r\n", "END\r\n");
                                } while (st.find("STAT curr_connections 1\r\n") == std::string::npos &&
                                         steady_clock_type::now() < deadline);
                                EXPECT_NE(st.find("STAT curr_connections 1\r\n"), std::string::npos)
                                    << "the killed connection is gone";
                                EXPECT_EQ(co_await c->call("get k\r\n", "END\r\n"),
                                          "VALUE k 0 3\r\nold\r\nEND\r\n");
                                EXPECT_EQ(co_await c->call(set_req("k", "new")), "STORED\r\n");
                                co_await c->out.close();
                                co_await ts.stop();
                            }),
              0);
}

/// Writes 400 gets of a 256 KB value (100 MB of replies) and reads nothing back.
future<std::unique_ptr<client>> flood_without_reading(test_server& ts) {
    auto c = co_await client::connect(ts.addr);
    if (co_await c->call(set_req("big", std::string(256 * 1024, 'b'))) != "STORED\r\n") {
        throw std::runtime_error("set big failed");
    }
    std::string gets;
    for (int i = 0; i < 400; ++i) {
        gets += "get big\r\n";
    }
    co_await c->send(gets);
    co_return c;
}

TEST(kv_server, a_client_that_does_not_read_is_throttled) {
    EXPECT_EQ(run_in_shards(1,
                            []() -> future<> {
                                test_server ts;
                                co_await ts.start();
                                long before = rss_kb();
                                auto c = co_await flood_without_reading(ts);
                                co_await sleep(std::chrono::milliseconds(500));
                                EXPECT_LT(rss_kb() - before, 40 * 1024)
                                    << "the server stopped reading instead of buffering replies";
                                auto sent = co_await ts.servers.invoke_on(
                                    0, [](kv::server& s) { return s.conn_stats().bytes_written; });
                                EXPECT_LT(sent, uint64_t(40) << 20);
                                // Nothing was lost: every reply arrives once the client reads.
                                size_t expect =
                                    400 *
                                    (std::string("VALUE big 0 262144\r\n\r\nEND\r\n").size() + 256 * 1024);
                                size_t got = 0;
                                while (got < expect) {
                                    auto b = co_await c->in.read();
                                    if (b.empty()) {
                                        break;
                                    }
                                    got += b.size();
                                }
                                EXPECT_EQ(got, expect);
                                EXPECT_EQ(co_await c->call("version\r\n"), "VERSION 1.6.18\r\n");
                                co_await c->out.close();
                                co_await ts.stop();
                            }),
              0);
}

TEST(kv_server, stop_aborts_a_client_that_does_not_read) {
    EXPECT_EQ(
        run_in_shards(1,
                      []() -> future<> {
                          test_server ts;
                          kv::server_config cfg;
                          cfg.drain_timeout = std::chrono::milliseconds(200);
                          co_await ts.start(cfg);
                          auto c = co_await flood_without_reading(ts);
                          co_await sleep(std::chrono::milliseconds(200));
                          co_await ts.stop(); // resolves: the drain deadline aborts the client (a hang fails)
                      }),
        0);
}

TEST(kv_server, expiry_follows_the_clock_the_test_sets) {
    EXPECT_EQ(
        run_in_shards(2,
                      []() -> future<> {
                          test_server ts;
                          kv::server_config cfg;
                          cfg.tick_clock = false;
                          co_await ts.start(cfg);
                          auto c = co_await client::connect(ts.addr);
                          uint32_t now =
                              co_await ts.servers.invoke_on(0, [](kv::server& s) { return s.store().now(); });
                          auto set_all = [&](uint32_t t) {
                              return ts.servers.invoke_on_all([t](kv::server& s) { s.store().set_time(t); });
                          };
                          co_await set_all(now);
                          std::string sets;
                          for (int i = 0; i < 20; ++i) {
                              sets += fmt::format("set e{} 0 100 1\r\nx\r\n", i);
                          }
                          co_await c->send(sets);
                          std::string stored;
                          for (int i = 0; i < 20; ++i) {
                              stored += "STORED\r\n";
                          }
                          EXPECT_EQ(co_await c->lines(20), stored);
                          std::string get = "get";
                          for (int i = 0; i < 20; ++i) {
                              get += fmt::format(" e{}", i);
                          }
                          get += "\r\n";
                          co_await set_all(now + 99);
                          auto r = co_await c->call(get, "END\r\n");
                          EXPECT_EQ(std::count(r.begin(), r.end(), 'V'), 20) << r;
                          co_await set_all(now + 100);
                          EXPECT_EQ(co_await c->call(get, "END\r\n"), "END\r\n");
                          co_await c->out.close();
                          co_await ts.stop();
                      }),
        0);
}

TEST(kv_server, eviction_under_a_small_memory_limit) {
    EXPECT_EQ(run_in_shards(
                  1,
                  []() -> future<> {
                      test_server ts;
                      kv::server_config cfg;
                      cfg.store.memory_limit = 4 << 20;
                      cfg.limit_maxbytes = 4 << 20;
                      co_await ts.start(cfg);
                      auto c = co_await client::connect(ts.addr);
                      std::string value(1000, 'v');
                      for (int batch = 0; batch < 100; ++batch) {
                          std::string sets;
                          for (int i = 0; i < 100; ++i) {
                              sets += set_req(fmt::format("k{}", batch * 100 + i), value);
                          }
                          co_await c->send(sets);
                          auto r = co_await c->lines(100);
                          if (r.find("STORED\r\n") != 0 || r.size() != 100 * 8) {
                              throw std::runtime_error("set under memory pressure: " + r.substr(0, 200));
                          }
                      }
                      auto st = co_await c->call("stats\r\n", "END\r\n");
                      auto evictions = st.find("STAT evictions ");
                      EXPECT_NE(evictions, std::string::npos);
                      EXPECT_GT(evictions == std::string::npos ? 0 : std::stoull(st.substr(evictions + 15)),
                                5000u);
                      EXPECT_EQ(co_await c->call("get k9999\r\n", "END\r\n"),
                                "VALUE k9999 0 1000\r\n" + value + "\r\nEND\r\n");
                      EXPECT_EQ(co_await c->call("get k0\r\n", "END\r\n"), "END\r\n");
                      co_await c->out.close();
                      co_await ts.stop();
                  }),
              0);
}

namespace {

/// References item memory held by replies in flight, over all shards.
future<size_t> refs_held(test_server& ts) {
    return ts.servers.map_reduce([](kv::server& s) { return s.store().refs_held(); }, size_t(0),
                                 [](size_t a, size_t b) { return a + b; });
}

} // namespace

TEST(kv_server, large_values_are_sent_from_item_memory_that_stays_intact) {
    EXPECT_EQ(
        run_in_shards(2,
                      []() -> future<> {
                          test_server ts;
                          co_await ts.start();
                          auto writer = co_await client::connect(ts.addr);
                          auto reader = co_await client::connect(ts.addr);
                          constexpr int n = 12;
                          constexpr size_t len = 900 * 1024;
                          auto value_of = [](int i, char base) {
                              std::string v(len, char(base + i));
                              for (size_t p = 0; p < len; p += 4096) {
                                  v[p] = char('0' + (p / 4096) % 10); // so that a shifted copy is caught too
                              }
                              return v;
                          };
                          std::string get = "get";
                          for (int i = 0; i < n; ++i) {
                              co_await writer->send(set_req(fmt::format("big{}", i), value_of(i, 'a')));
                              EXPECT_EQ(co_await writer->until("\r\n"), "STORED\r\n");
                              get += fmt::format(" big{}", i);
                          }
                          // 10.8 MB of replies to a client that does not read yet: the socket takes a
                          // part, the rest waits in item memory, referenced.
                          co_await reader->send(get + "\r\n");
                          size_t held = 0;
                          for (int i = 0; i < 2000 && held == 0; ++i) {
                              co_await sleep(std::chrono::milliseconds(1));
                              held = co_await refs_held(ts);
                          }
                          EXPECT_GT(held, 0u) << "values are sent from item memory, not copied";
                          // Delete half, overwrite the other half, and write as much again so that freed
                          // chunks would be reused at once if a held one were among them.
                          for (int i = 0; i < n; ++i) {
                              auto k = fmt::format("big{}", i);
                              if (i % 2) {
                                  co_await writer->send(fmt::format("delete {}\r\n", k));
                                  EXPECT_EQ(co_await writer->until("\r\n"), "DELETED\r\n");
                              } else {
                                  co_await writer->send(set_req(k, value_of(i, 'A')));
                                  EXPECT_EQ(co_await writer->until("\r\n"), "STORED\r\n");
                              }
                              co_await writer->send(set_req(fmt::format("other{}", i), value_of(i, 'n')));
                              EXPECT_EQ(co_await writer->until("\r\n"), "STORED\r\n");
                          }
                          std::string expect;
                          for (int i = 0; i < n; ++i) {
                              expect += fmt::format("VALUE big{} 0 {}\r\n{}\r\n", i, len, value_of(i, 'a'));
                          }
                          expect += "END\r\n";
                          std::string got = co_await reader->until("END\r\n");
                          EXPECT_EQ(got.size(), expect.size());
                          EXPECT_TRUE(got == expect)
                              << "the reply carries the values as they were when asked for";
                          size_t left = 1;
                          for (int i = 0; i < 2000 && left; ++i) {
                              left = co_await refs_held(ts);
                              if (left) {
                                  co_await sleep(std::chrono::milliseconds(1));
                              }
                          }
                          EXPECT_EQ(left, 0u) << "every reference is dropped once the reply is sent";
                          co_await reader->send("get big0\r\n");
                          EXPECT_EQ(co_await reader->until("END\r\n"),
                                    fmt::format("VALUE big0 0 {}\r\n{}\r\nEND\r\n", len, value_of(0, 'A')));
                          co_await writer->out.close();
                          co_await reader->out.close();
                          co_await ts.stop();
                      }),
        0);
}

namespace {

/// The value of statistic `name` in a `stats` reply (-1 when absent).
long long stat_of(const std::string& stats, std::string_view name) {
    auto at = stats.find(fmt::format("STAT {} ", name));
    if (at == std::string::npos) {
        return -1;
    }
    return std::stoll(stats.substr(at + 6 + name.size()));
}

/// Polls `stats` on `c` until `name` equals `want` (a minute at most); returns the last value.
future<long long> wait_for_stat(client& c, std::string_view name, long long want) {
    auto deadline = steady_clock_type::now() + std::chrono::seconds(60);
    long long v = -1;
    for (;;) {
        v = stat_of(co_await c.call("stats\r\n", "END\r\n"), name);
        if (v == want || steady_clock_type::now() > deadline) {
            co_return v;
        }
        co_await sleep(std::chrono::milliseconds(10));
    }
}

} // namespace

TEST(kv_server, stalled_large_values_land_in_the_store_and_never_starve_other_clients) {
    EXPECT_EQ(
        run_in_shards(
            2,
            []() -> future<> {
                test_server ts;
                kv::server_config cfg;
                cfg.store.memory_limit = 8 << 20; // per shard
                cfg.tick_clock = false;
                co_await ts.start(cfg);
                auto c = co_await client::connect(ts.addr);
                const size_t len = 1000000;
                // Keys of the stalled sets hold old values: a refused set drops them.
                std::vector<std::unique_ptr<client>> stalled;
                for (int i = 0; i < 24; ++i) {
                    auto key = fmt::format("stalled-{}", i);
                    EXPECT_EQ(co_await c->call(set_req(key, "old")), "STORED\r\n");
                    auto s = co_await client::connect(ts.addr);
                    co_await s->send(fmt::format("set {} 0 0 {}\r\n", key, len) +
                                     std::string(len - 1000, 's'));
                    stalled.push_back(std::move(s));
                }
                // In-flight values hold at most half of each store: the others are refused
                // at once, with memcached's error, while their senders still send.
                auto deadline = steady_clock_type::now() + std::chrono::seconds(60);
                std::string st;
                do {
                    co_await sleep(std::chrono::milliseconds(10));
                    st = co_await c->call("stats\r\n", "END\r\n");
                } while (stat_of(st, "store_no_memory") + stat_of(st, "incomplete_value_bytes") / len < 24 &&
                         steady_clock_type::now() < deadline);
                EXPECT_EQ(stat_of(st, "store_no_memory") + stat_of(st, "incomplete_value_bytes") / len, 24);
                EXPECT_LE(stat_of(st, "incomplete_value_bytes"), 2 * (4 << 20));
                size_t refused = 0;
                for (size_t i = 0; i < stalled.size(); ++i) {
                    auto key = fmt::format("stalled-{}", i);
                    auto got = co_await c->call("get " + key + "\r\n", "END\r\n");
                    if (got == "END\r\n") {
                        // Refused: it answered, and its old value is gone (memcached's rule).
                        EXPECT_EQ(co_await stalled[i]->until("\r\n"),
                                  "SERVER_ERROR out of memory storing object\r\n");
                        ++refused;
                    } else {
                        EXPECT_EQ(got, "VALUE " + key + " 0 3\r\nold\r\nEND\r\n"); // still landing
                    }
                }
                EXPECT_GE(refused, 24u - 8u) << "each 8 MB store takes at most four 1 MB values";
                // Other clients store and read small and large values meanwhile.
                for (int i = 0; i < 50; ++i) {
                    auto key = fmt::format("other-{}", i);
                    auto value = std::string(i % 2 ? 100 : 100000, char('a' + i % 26));
                    EXPECT_EQ(co_await c->call(set_req(key, value)), "STORED\r\n");
                    EXPECT_EQ(co_await c->call("get " + key + "\r\n", "END\r\n"),
                              fmt::format("VALUE {} 0 {}\r\n{}\r\nEND\r\n", key, value.size(), value));
                }
                // One landing value completes: it is stored byte for byte.
                for (size_t i = 0; i < stalled.size(); ++i) {
                    auto key = fmt::format("stalled-{}", i);
                    if (co_await c->call("get " + key + "\r\n", "END\r\n") != "END\r\n") {
                        co_await stalled[i]->send(std::string(1000, 's') + "\r\n");
                        EXPECT_EQ(co_await stalled[i]->until("\r\n"), "STORED\r\n");
                        EXPECT_EQ(
                            co_await c->call("get " + key + "\r\n", "END\r\n"),
                            fmt::format("VALUE {} 0 {}\r\n{}\r\nEND\r\n", key, len, std::string(len, 's')));
                        break;
                    }
                }
                // The stalled senders vanish: every reserved byte returns.
                stalled.clear();
                EXPECT_EQ(co_await wait_for_stat(*c, "incomplete_value_bytes", 0), 0);
                EXPECT_EQ(co_await wait_for_stat(*c, "curr_connections", 1), 1);
                co_await c->out.close();
                co_await ts.stop();
            }),
        0);
}

TEST(kv_server, a_value_split_over_many_reads_lands_whole_and_a_bad_end_is_refused) {
    EXPECT_EQ(run_in_shards(
                  2,
                  []() -> future<> {
                      test_server ts;
                      co_await ts.start();
                      auto c = co_await client::connect(ts.addr);
                      std::string value(300000, 'v');
                      for (size_t i = 0; i < value.size(); i += 7) {
                          value[i] = char('a' + i % 26);
                      }
                      // Sent in pieces, the next request right behind the value's end.
                      std::string req = set_req("split", value) + "get split\r\n";
                      for (size_t at = 0; at < req.size(); at += 65536 + 3) {
                          co_await c->send(std::string_view(req).substr(at, 65536 + 3));
                          co_await sleep(std::chrono::milliseconds(1));
                      }
                      EXPECT_EQ(co_await c->until("END\r\n"),
                                "STORED\r\nVALUE split 0 300000\r\n" + value + "\r\nEND\r\n");
                      // ms and append take the same path.
                      EXPECT_EQ(co_await c->call("ms split 300000 T0 O7\r\n" + value + "\r\n"), "HD O7\r\n");
                      EXPECT_EQ(
                          co_await c->call("append split 0 0 4000\r\n" + std::string(4000, 'z') + "\r\n"),
                          "STORED\r\n");
                      EXPECT_EQ(co_await c->call("mg split s\r\n"), "HD s304000\r\n");
                      // A block that does not end in CRLF is refused; the old value stays.
                      EXPECT_EQ(co_await c->call("set split 0 0 5000\r\n" + std::string(5000, 'x') + "ab"),
                                "CLIENT_ERROR bad data chunk\r\n");
                      EXPECT_EQ(co_await c->call("mg split s\r\n"), "HD s304000\r\n");
                      auto st = co_await c->call("stats\r\n", "END\r\n");
                      EXPECT_EQ(stat_of(st, "incomplete_value_bytes"), 0);
                      co_await c->out.close();
                      co_await ts.stop();
                  }),
              0);
}

TEST(kv_server, an_idle_timeout_closes_silent_connections_only) {
    EXPECT_EQ(run_in_shards(2,
                            []() -> future<> {
                                test_server ts;
                                kv::server_config cfg;
                                cfg.idle_timeout = std::chrono::seconds(2);
                                co_await ts.start(cfg);
                                auto silent = co_await client::connect(ts.addr);
                                auto half = co_await client::connect(ts.addr);
                                co_await half->send("set k 0 0 100000\r\nabc"); // then nothing
                                auto busy = co_await client::connect(ts.addr);
                                // The busy client keeps talking past the timeout and is never cut.
                                for (int i = 0; i < 60; ++i) {
                                    EXPECT_EQ(co_await busy->call("version\r\n"), "VERSION 1.6.18\r\n");
                                    co_await sleep(std::chrono::milliseconds(50));
                                }
                                // Both silent ones are closed (a read sees the end of the stream).
                                for (auto* c : {silent.get(), half.get()}) {
                                    try {
                                        while (!(co_await c->in.read()).empty()) {
                                        }
                                    } catch (...) {
                                        // A reset is a close too.
                                    }
                                }
                                EXPECT_EQ(co_await wait_for_stat(*busy, "idle_kicks", 2), 2);
                                EXPECT_EQ(co_await wait_for_stat(*busy, "incomplete_value_bytes", 0), 0);
                                EXPECT_EQ(co_await wait_for_stat(*busy, "curr_connections", 1), 1);
                                co_await busy->out.close();
                                co_await ts.stop();
                            }),
              0);
}
