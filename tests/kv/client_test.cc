// kv::client: MD5 and the ketama ring against libmemcached's own choice of server, and the
// client against in-process shoal-kv servers (pipelining, multi-get across servers, a server
// down, a connection dropped with requests in flight, server errors, bad keys) and against
// Debian's memcached where it is installed.
#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "core/timer.hh"
#include "kv/client/client.hh"
#include "kv/client/internal/md5.hh"
#include "net/rdma/memory_pool.hh"
#include "net/tcp/tcp.hh"
#include "tests/kv/kv_test_util.hh"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace shoal;
using shoal::kv_test::run_in_shards;
using shoal::kv_test::test_server;

namespace {

std::string hex(const std::array<uint8_t, 16>& d) {
    std::string s;
    for (uint8_t b : d) {
        s += fmt::format("{:02x}", b);
    }
    return s;
}

/// The kind of the client_error a future failed with ("none" when it did not fail).
template <typename T>
future<std::string> failure_of(future<T> f, std::string* what = nullptr) {
    try {
        co_await std::move(f);
        co_return "none";
    } catch (const kv::client_error& e) {
        if (what) {
            *what = e.what();
        }
        switch (e.code()) {
        case kv::client_errc::bad_request:
            co_return "bad_request";
        case kv::client_errc::connection:
            co_return "connection";
        case kv::client_errc::server:
            co_return "server";
        }
    } catch (const std::exception& e) {
        if (what) {
            *what = e.what();
        }
    }
    co_return "other";
}

kv::client_config config_of(std::initializer_list<net::socket_address> addrs) {
    kv::client_config cfg;
    for (const auto& a : addrs) {
        auto text = a.to_string();
        auto colon = text.rfind(':');
        cfg.servers.push_back({text.substr(0, colon), uint16_t(std::stoi(text.substr(colon + 1))), 1});
    }
    return cfg;
}

/// A port nothing listens on (bound, then released).
net::socket_address closed_port() {
    auto ss = net::tcp::listen(net::socket_address::parse("127.0.0.1:0"));
    auto a = ss.local_address();
    ss.abort_accept();
    return a;
}

/// Reads until the peer closes or breaks the connection (a client that aborts sends a reset:
/// the read then fails, which is as much an end as an empty read).
future<> drain(net::input_stream& in) {
    try {
        while (!(co_await in.read()).empty()) {
        }
    } catch (const std::system_error&) {
    }
}

/// Total connections a server has accepted (all shards).
future<uint64_t> accepted(test_server& ts) {
    return ts.servers.map_reduce([](kv::server& s) { return s.conn_stats().total_connections; }, uint64_t(0),
                                 [](uint64_t a, uint64_t b) { return a + b; });
}

} // namespace

TEST(kv_md5, rfc1321_test_suite) {
    EXPECT_EQ(hex(kv::md5("")), "d41d8cd98f00b204e9800998ecf8427e");
    EXPECT_EQ(hex(kv::md5("a")), "0cc175b9c0f1b6a831c399e269772661");
    EXPECT_EQ(hex(kv::md5("abc")), "900150983cd24fb0d6963f7d28e17f72");
    EXPECT_EQ(hex(kv::md5("message digest")), "f96b697d7cb7938d525a2f31aaf161d0");
    EXPECT_EQ(hex(kv::md5("abcdefghijklmnopqrstuvwxyz")), "c3fcd3d76192e4007dfb496cca67e13b");
    EXPECT_EQ(hex(kv::md5("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")),
              "d174ab98d277d9f5a5611c2c9f419d9f");
    EXPECT_EQ(
        hex(kv::md5("12345678901234567890123456789012345678901234567890123456789012345678901234567890")),
        "57edf4a22be3c955ac49da2e2107b67a");
    // 55 and 56 bytes: the length fits in the last block or needs one more.
    EXPECT_EQ(hex(kv::md5(std::string(55, 'x'))), "04364420e25c512fd958a70738aa8f72");
    EXPECT_EQ(hex(kv::md5(std::string(56, 'x'))), "668a72d5ba17f08e62dabcafad6db14b");
}

namespace {

/// One ring configuration compared with libmemcached.
struct ring_case {
    kv::ketama_mode mode;
    std::vector<kv::server_endpoint> servers;
};

/// libmemcached's server index for each of `keys` (via the helper program).
std::vector<unsigned> libmemcached_choice(const ring_case& c, const std::vector<std::string>& keys) {
    auto dir = std::filesystem::temp_directory_path();
    auto in = dir / fmt::format("kv_ketama_keys_{}", ::getpid());
    {
        std::ofstream f(in);
        for (const auto& k : keys) {
            f << k << '\n';
        }
    }
    std::string cmd = fmt::format("{} {}", SHOAL_LIBMEMCACHED_KETAMA,
                                  c.mode == kv::ketama_mode::weighted ? "weighted" : "plain");
    for (const auto& s : c.servers) {
        cmd += fmt::format(" {}:{}:{}", s.host, s.port, s.weight);
    }
    cmd += " < " + in.string();
    std::vector<unsigned> out;
    FILE* p = ::popen(cmd.c_str(), "r");
    EXPECT_NE(p, nullptr) << cmd;
    if (!p) {
        return out;
    }
    unsigned idx;
    while (std::fscanf(p, "%u", &idx) == 1) {
        out.push_back(idx);
    }
    EXPECT_EQ(::pclose(p), 0) << cmd;
    std::filesystem::remove(in);
    return out;
}

} // namespace

TEST(kv_ketama, same_server_as_libmemcached) {
    if (std::string_view(SHOAL_LIBMEMCACHED_KETAMA).empty()) {
        GTEST_SKIP() << "libmemcached-dev is not installed (scripts/install-deps.sh installs it): "
                        "the ring was not compared with libmemcached";
    }
    std::vector<std::string> keys;
    std::mt19937 rng(12);
    for (int i = 0; i < 5000; ++i) {
        keys.push_back(fmt::format("key:{}", i));
    }
    for (int i = 0; i < 5000; ++i) {
        std::string k(1 + rng() % 120, 'a');
        for (auto& ch : k) {
            ch = char('!' + rng() % 94);
        }
        keys.push_back(k);
    }
    std::vector<ring_case> cases = {
        {kv::ketama_mode::weighted,
         {{"127.0.0.1", 11211, 1}, {"10.0.0.2", 11211, 1}, {"10.0.0.3", 11211, 1}}},
        {kv::ketama_mode::weighted,
         {{"10.1.0.1", 11211, 1}, {"10.1.0.2", 22122, 2}, {"10.1.0.3", 11311, 3}, {"10.1.0.4", 11211, 5}}},
        {kv::ketama_mode::weighted,
         {{"192.168.1.1", 11211, 1},
          {"192.168.1.2", 11211, 1},
          {"192.168.1.3", 11211, 1},
          {"192.168.1.4", 11211, 1},
          {"192.168.1.5", 11211, 1},
          {"192.168.1.6", 11211, 1},
          {"192.168.1.7", 11211, 1}}},
        {kv::ketama_mode::weighted, {{"127.0.0.1", 5000, 1}, {"127.0.0.1", 5001, 1}}},
        // weight 0 (memcached_server_add's default) counts as 1 in both
        {kv::ketama_mode::weighted, {{"10.3.0.1", 11211, 0}, {"10.3.0.2", 11211, 2}, {"10.3.0.3", 11211, 0}}},
        {kv::ketama_mode::plain, {{"127.0.0.1", 11211, 1}, {"10.0.0.2", 11212, 1}, {"10.0.0.3", 11213, 1}}},
        {kv::ketama_mode::plain, {{"10.2.0.1", 11211, 1}, {"10.2.0.2", 11211, 1}}},
    };
    for (size_t ci = 0; ci < cases.size(); ++ci) {
        const auto& c = cases[ci];
        kv::ketama_ring ring(c.servers, c.mode);
        auto theirs = libmemcached_choice(c, keys);
        ASSERT_EQ(theirs.size(), keys.size()) << "case " << ci;
        size_t mismatches = 0;
        std::vector<size_t> per_server(c.servers.size());
        for (size_t i = 0; i < keys.size(); ++i) {
            unsigned mine = ring.server_of(keys[i]);
            ++per_server[mine];
            if (mine != theirs[i] && ++mismatches <= 3) {
                ADD_FAILURE() << "case " << ci << ": key '" << keys[i] << "' -> server " << mine
                              << ", libmemcached chooses " << theirs[i];
            }
        }
        EXPECT_EQ(mismatches, 0u) << "case " << ci;
        for (size_t s = 0; s < per_server.size(); ++s) {
            EXPECT_GT(per_server[s], keys.size() / per_server.size() / 4) << "case " << ci << " server " << s;
        }
    }
}

TEST(kv_ketama, one_server_takes_every_key_and_weights_shift_keys) {
    std::vector<kv::server_endpoint> one = {{"10.0.0.1", 11211, 1}};
    kv::ketama_ring r1(one, kv::ketama_mode::weighted);
    EXPECT_EQ(r1.server_of("anything"), 0u);
    std::vector<kv::server_endpoint> two = {{"10.0.0.1", 11211, 1}, {"10.0.0.2", 11211, 3}};
    kv::ketama_ring r2(two, kv::ketama_mode::weighted);
    EXPECT_EQ(r2.points(), 320u) << "160 points per server, shared by weight";
    size_t second = 0;
    for (int i = 0; i < 4000; ++i) {
        second += r2.server_of(fmt::format("k{}", i));
    }
    EXPECT_GT(second, 2600u) << "weight 3 of 4 takes about three quarters of the keys";
    EXPECT_LT(second, 3400u);
}

TEST(kv_client, pipelined_set_and_get_on_one_connection) {
    EXPECT_EQ(
        run_in_shards(2,
                      []() -> future<> {
                          test_server ts;
                          co_await ts.start();
                          kv::client c(config_of({ts.addr}));
                          constexpr int n = 2000;
                          std::vector<future<kv::store_outcome>> sets;
                          for (int i = 0; i < n; ++i) {
                              sets.push_back(
                                  c.set(fmt::format("p{}", i), fmt::format("value-{}", i), uint32_t(i)));
                          }
                          auto stored = co_await when_all_succeed(std::move(sets));
                          EXPECT_EQ(std::count(stored.begin(), stored.end(), kv::store_outcome::stored), n);
                          std::vector<future<std::optional<kv::fetched_value>>> gets;
                          for (int i = 0; i < n; ++i) {
                              gets.push_back(c.get(fmt::format("p{}", i)));
                          }
                          gets.push_back(c.get("missing"));
                          auto got = co_await when_all_succeed(std::move(gets));
                          for (int i = 0; i < n; ++i) {
                              EXPECT_TRUE(got[i] && got[i]->data == fmt::format("value-{}", i) &&
                                          got[i]->flags == uint32_t(i) && got[i]->cas != 0)
                                  << i;
                          }
                          EXPECT_FALSE(got[n]);
                          EXPECT_EQ(co_await accepted(ts), 1u) << "4001 requests in flight on one connection";
                          co_await c.close();
                          co_await ts.stop();
                      }),
        0);
}

namespace {

/// The same storage semantics whatever the server (shoal-kv or memcached).
future<> check_commands(net::socket_address addr) {
    kv::client c(config_of({addr}));
    EXPECT_EQ(co_await c.set("k", "v1", 7, 0), kv::store_outcome::stored);
    EXPECT_EQ(co_await c.add("k", "v2"), kv::store_outcome::not_stored);
    EXPECT_EQ(co_await c.replace("nokey", "v"), kv::store_outcome::not_stored);
    EXPECT_EQ(co_await c.add("k2", "a"), kv::store_outcome::stored);
    EXPECT_EQ(co_await c.replace("k2", "b"), kv::store_outcome::stored);
    auto v = co_await c.get("k");
    EXPECT_TRUE(v && v->data == "v1" && v->flags == 7u);
    uint64_t unique = v ? v->cas : 0;
    EXPECT_EQ(co_await c.cas("k", "v3", unique), kv::store_outcome::stored);
    EXPECT_EQ(co_await c.cas("k", "v4", unique), kv::store_outcome::exists) << "the unique changed";
    EXPECT_EQ(co_await c.cas("gone", "v", 1), kv::store_outcome::not_found);
    EXPECT_EQ((co_await c.get("k"))->data, "v3");
    EXPECT_EQ(co_await c.set("n", "10"), kv::store_outcome::stored);
    EXPECT_EQ(co_await c.incr("n", 5), std::optional<uint64_t>(15));
    EXPECT_EQ(co_await c.decr("n", 100), std::optional<uint64_t>(0)) << "decr stops at 0";
    EXPECT_EQ(co_await c.incr("n", ~uint64_t(0)), std::optional<uint64_t>(~uint64_t(0)));
    EXPECT_EQ(co_await c.incr("n", 2), std::optional<uint64_t>(1)) << "incr wraps at 2^64";
    EXPECT_EQ(co_await c.incr("nokey", 1), std::nullopt);
    std::string what;
    EXPECT_EQ(co_await failure_of(c.incr("k", 1), &what), "server");
    EXPECT_NE(what.find("CLIENT_ERROR cannot increment or decrement non-numeric value"), std::string::npos)
        << what;
    EXPECT_TRUE(co_await c.remove("k"));
    EXPECT_FALSE(co_await c.remove("k"));
    EXPECT_FALSE(co_await c.get("k"));
    EXPECT_EQ(co_await c.set("expired", "x", 0, -1), kv::store_outcome::stored);
    EXPECT_FALSE(co_await c.get("expired")) << "a negative exptime stores an expired item";
    EXPECT_TRUE(co_await c.touch("k2", 3600));
    EXPECT_EQ((co_await c.get("k2"))->data, "b") << "touch keeps the value";
    EXPECT_FALSE(co_await c.touch("nokey", 3600));
    EXPECT_TRUE(co_await c.touch("k2", -1));
    EXPECT_FALSE(co_await c.get("k2")) << "touched into the past: expired";
    EXPECT_FALSE(co_await c.touch("k2", 0));
    // gat: the value as it gets a new exptime; into the past, memcached still returns it once.
    EXPECT_EQ(co_await c.set("g", "gv", 7), kv::store_outcome::stored);
    auto g = co_await c.gat("g", 3600);
    EXPECT_TRUE(g && g->data == "gv" && g->flags == 7u && g->cas != 0) << "gat returns the value";
    EXPECT_FALSE(co_await c.gat("nokey", 3600));
    g = co_await c.gat("g", -1);
    EXPECT_TRUE(g && g->data == "gv") << "gat into the past returns the value it expires";
    EXPECT_FALSE(co_await c.get("g")) << "gat into the past: expired after it";
    // stats: the server's general statistics, the commands above counted.
    std::vector<kv::server_stats> all = co_await c.stats();
    EXPECT_EQ(all.size(), 1u);
    auto stat = [&](std::string_view name) {
        return all.empty() ? std::string_view() : kv::stat_value(all.front(), name);
    };
    EXPECT_EQ(stat("pid").find_first_not_of("0123456789"), std::string_view::npos) << stat("pid");
    EXPECT_FALSE(stat("version").empty());
    // The gets, touches and gats above, as memcached counts them (a gat counts as a touch).
    EXPECT_EQ(stat("get_hits"), "3");
    EXPECT_EQ(stat("get_misses"), "4");
    EXPECT_EQ(stat("touch_hits"), "4");
    EXPECT_EQ(stat("touch_misses"), "3");
    EXPECT_EQ(stat("cmd_set"), "11") << "every storage command, stored or not";
    std::string big(300 * 1024, 'b');
    for (size_t i = 0; i < big.size(); i += 4096) {
        big[i] = char('a' + i / 4096 % 26);
    }
    EXPECT_EQ(co_await c.set("big", big), kv::store_outcome::stored);
    auto b = co_await c.get("big");
    EXPECT_TRUE(b && b->data == big) << "a value that arrives in many reads";
    EXPECT_EQ(co_await c.set("ap", "mid", 5, 0), kv::store_outcome::stored);
    EXPECT_EQ(co_await c.append("ap", "-end"), kv::store_outcome::stored);
    EXPECT_EQ(co_await c.prepend("ap", "start-"), kv::store_outcome::stored);
    auto ap = co_await c.get("ap");
    EXPECT_TRUE(ap && ap->data == "start-mid-end" && ap->flags == 5u) << "append/prepend keep the flags";
    EXPECT_EQ(co_await c.append("nokey", "x"), kv::store_outcome::not_stored);
    EXPECT_EQ(co_await c.prepend("nokey", "x"), kv::store_outcome::not_stored);
    co_await c.flush_all(100); // in 100 s: everything stays visible now
    auto still = co_await c.get("big");
    EXPECT_TRUE(still && still->data == big) << "a delayed flush_all took effect at once";
    co_await c.flush_all();
    EXPECT_FALSE(co_await c.get("big"));
    EXPECT_FALSE(co_await c.get("n"));
    EXPECT_EQ(co_await c.set("after", "x"), kv::store_outcome::stored);
    EXPECT_EQ((co_await c.get("after"))->data, "x") << "stored after the flush, in its second";
    co_await c.close();
}

/// Debian's memcached on a free port, stopped at the end of the test.
struct memcached_process {
    pid_t pid = -1;
    uint16_t port = 0;

    bool start() {
        const char* bin = "/usr/bin/memcached";
        if (::access(bin, X_OK) != 0) {
            return false;
        }
        auto ss = net::tcp::listen(net::socket_address::parse("127.0.0.1:0"));
        port = ss.local_address().port();
        ss.abort_accept();
        auto p = std::to_string(port);
        pid = ::fork();
        if (pid == 0) {
            if (::geteuid() == 0) {
                ::execl(bin, bin, "-l", "127.0.0.1", "-p", p.c_str(), "-U", "0", "-t", "1", "-u", "root",
                        nullptr);
            } else {
                ::execl(bin, bin, "-l", "127.0.0.1", "-p", p.c_str(), "-U", "0", "-t", "1", nullptr);
            }
            ::_exit(127);
        }
        return pid > 0;
    }
    /// Resolves once it accepts connections (at most about 5 s).
    future<bool> ready() {
        for (int i = 0; i < 250; ++i) {
            try {
                auto s =
                    co_await net::tcp::connect(net::socket_address::parse(fmt::format("127.0.0.1:{}", port)));
                co_return true;
            } catch (...) {
            }
            co_await sleep(std::chrono::milliseconds(20));
        }
        co_return false;
    }
    ~memcached_process() {
        if (pid > 0) {
            ::kill(pid, SIGTERM);
            ::waitpid(pid, nullptr, 0);
        }
    }
};

} // namespace

TEST(kv_client, commands_against_shoal_kv) {
    EXPECT_EQ(run_in_shards(2,
                            []() -> future<> {
                                test_server ts;
                                co_await ts.start();
                                co_await check_commands(ts.addr);
                                co_await ts.stop();
                            }),
              0);
}

TEST(kv_client, commands_against_memcached) {
    memcached_process m;
    if (!m.start()) {
        GTEST_SKIP() << "memcached is not installed (apt-get install memcached): not checked against it";
    }
    EXPECT_EQ(run_in_shards(1,
                            [&m]() -> future<> {
                                EXPECT_TRUE(co_await m.ready()) << "memcached did not start listening";
                                co_await check_commands(
                                    net::socket_address::parse(fmt::format("127.0.0.1:{}", m.port)));
                            }),
              0);
}

TEST(kv_client, multi_get_across_servers) {
    EXPECT_EQ(run_in_shards(
                  2,
                  []() -> future<> {
                      test_server a, b, c3;
                      co_await a.start();
                      co_await b.start();
                      co_await c3.start();
                      kv::client c(config_of({a.addr, b.addr, c3.addr}));
                      std::vector<std::string> keys;
                      std::vector<future<kv::store_outcome>> sets;
                      for (int i = 0; i < 600; ++i) {
                          keys.push_back(fmt::format("mg{}", i));
                          if (i % 3 != 2) { // every third key stays missing
                              sets.push_back(c.set(keys.back(), fmt::format("v{}", i)));
                          }
                      }
                      co_await when_all_succeed(std::move(sets));
                      // Each key is on the server the ring names, and only there.
                      test_server* servers[] = {&a, &b, &c3};
                      size_t on[3] = {};
                      for (unsigned s = 0; s < 3; ++s) {
                          kv::client only(config_of({servers[s]->addr}));
                          for (int i = 0; i < 600; i += 3) {
                              bool here = bool(co_await only.get(keys[i]));
                              EXPECT_EQ(here, c.server_of(keys[i]) == s) << keys[i] << " on server " << s;
                              on[s] += here;
                          }
                          co_await only.close();
                      }
                      for (unsigned s = 0; s < 3; ++s) {
                          EXPECT_GT(on[s], 20u) << "server " << s << " holds its share";
                      }
                      keys.push_back("mg0"); // a key asked twice
                      auto got = co_await c.get_many(keys);
                      EXPECT_EQ(got.size(), keys.size());
                      got.resize(keys.size());
                      for (int i = 0; i < 600; ++i) {
                          if (i % 3 == 2) {
                              EXPECT_FALSE(got[i]) << keys[i];
                          } else {
                              EXPECT_TRUE(got[i] && got[i]->data == fmt::format("v{}", i)) << keys[i];
                          }
                      }
                      EXPECT_TRUE(got[600] && got[600]->data == "v0");
                      // flush_all reaches every server.
                      co_await c.flush_all();
                      auto flushed = co_await c.get_many(keys);
                      EXPECT_EQ(
                          std::count_if(flushed.begin(), flushed.end(), [](auto& v) { return bool(v); }), 0);
                      co_await c.close();
                      co_await a.stop();
                      co_await b.stop();
                      co_await c3.stop();
                  }),
              0);
}

TEST(kv_client, server_down_fails_its_keys_only) {
    EXPECT_EQ(
        run_in_shards(1,
                      []() -> future<> {
                          test_server up;
                          co_await up.start();
                          kv::client c(config_of({up.addr, closed_port()}));
                          std::string live, dead;
                          for (int i = 0; !(live.size() && dead.size()); ++i) {
                              auto k = fmt::format("d{}", i);
                              (c.server_of(k) == 0 ? live : dead) = k;
                          }
                          std::string what;
                          EXPECT_EQ(co_await failure_of(c.set(dead, "x"), &what), "connection");
                          EXPECT_NE(what.find("Connection refused"), std::string::npos) << what;
                          EXPECT_EQ(co_await failure_of(c.get(dead)), "connection")
                              << "tried again, refused again";
                          EXPECT_EQ(co_await c.set(live, "y"), kv::store_outcome::stored);
                          std::vector<std::string> both = {live, dead};
                          EXPECT_EQ(co_await failure_of(c.get_many(std::move(both)), &what), "connection");
                          EXPECT_EQ((co_await c.get(live))->data, "y") << "the live server is unaffected";
                          co_await c.close();
                          co_await up.stop();
                      }),
        0);
}

TEST(kv_client, dropped_connection_fails_requests_in_flight_then_reconnects) {
    EXPECT_EQ(run_in_shards(1,
                            []() -> future<> {
                                // A server that hangs up on its first connection after reading, and
                                // answers a get with END on the second.
                                auto ss = net::tcp::listen(net::socket_address::parse("127.0.0.1:0"));
                                auto addr = ss.local_address();
                                auto serve = [&ss]() -> future<> {
                                    auto first = co_await ss.accept();
                                    auto in1 = first.connection.input();
                                    co_await in1.read();
                                    first.connection.abort();
                                    auto second = co_await ss.accept();
                                    auto in2 = second.connection.input();
                                    auto out2 = second.connection.output();
                                    std::string got;
                                    while (got.find("\r\n") == std::string::npos) {
                                        auto b = co_await in2.read();
                                        if (b.empty()) {
                                            break;
                                        }
                                        got.append(b.view());
                                    }
                                    EXPECT_EQ(got, "gets again\r\n");
                                    co_await out2.write("END\r\n");
                                    co_await out2.flush();
                                    co_await drain(in2); // until the client closes
                                    co_await out2.close();
                                };
                                auto server_done = serve();
                                kv::client c(config_of({addr}));
                                std::vector<future<std::string>> inflight;
                                for (int i = 0; i < 5; ++i) {
                                    inflight.push_back(failure_of(c.get(fmt::format("k{}", i))));
                                }
                                for (auto& f : inflight) {
                                    EXPECT_EQ(co_await std::move(f), "connection");
                                }
                                EXPECT_FALSE(co_await c.get("again")) << "a new connection answers";
                                co_await c.close();
                                co_await std::move(server_done);
                            }),
              0);
}

TEST(kv_client, garbled_reply_breaks_the_connection) {
    EXPECT_EQ(run_in_shards(1,
                            []() -> future<> {
                                auto ss = net::tcp::listen(net::socket_address::parse("127.0.0.1:0"));
                                auto addr = ss.local_address();
                                auto serve = [&ss]() -> future<> {
                                    auto a = co_await ss.accept();
                                    auto in = a.connection.input();
                                    auto out = a.connection.output();
                                    co_await in.read();
                                    co_await out.write("HELLO\r\n");
                                    co_await out.flush();
                                    co_await drain(in); // until the client hangs up
                                };
                                auto server_done = serve();
                                kv::client c(config_of({addr}));
                                std::string what;
                                EXPECT_EQ(co_await failure_of(c.set("k", "v"), &what), "connection");
                                EXPECT_NE(what.find("unexpected reply 'HELLO'"), std::string::npos) << what;
                                co_await c.close();
                                co_await std::move(server_done);
                            }),
              0);
}

TEST(kv_client, server_error_fails_only_that_request) {
    EXPECT_EQ(
        run_in_shards(1,
                      []() -> future<> {
                          test_server ts;
                          kv::server_config cfg;
                          cfg.store.max_item_size = cfg.limits.max_item_size = 64 * 1024;
                          co_await ts.start(cfg);
                          kv::client c(config_of({ts.addr}));
                          auto before = c.set("a", "1");
                          std::string what;
                          auto too_big = failure_of(c.set("b", std::string(100 * 1024, 'x')), &what);
                          auto after = c.get("a");
                          EXPECT_EQ(co_await std::move(before), kv::store_outcome::stored);
                          EXPECT_EQ(co_await std::move(too_big), "server");
                          EXPECT_NE(what.find("SERVER_ERROR object too large for cache"), std::string::npos)
                              << what;
                          auto a = co_await std::move(after);
                          EXPECT_TRUE(a && a->data == "1") << "the request after it is answered";
                          EXPECT_EQ(co_await accepted(ts), 1u) << "on the same connection";
                          co_await c.close();
                          co_await ts.stop();
                      }),
        0);
}

TEST(kv_client, bad_keys_are_refused_before_sending) {
    EXPECT_EQ(run_in_shards(1,
                            []() -> future<> {
                                test_server ts;
                                co_await ts.start();
                                kv::client c(config_of({ts.addr}));
                                EXPECT_EQ(co_await failure_of(c.set("has space", "v")), "bad_request");
                                EXPECT_EQ(co_await failure_of(c.get(std::string(251, 'k'))), "bad_request");
                                EXPECT_EQ(co_await failure_of(c.get("")), "bad_request");
                                EXPECT_EQ(co_await failure_of(c.remove("new\r\nline")), "bad_request");
                                std::vector<std::string> one_bad = {"ok", "not ok"};
                                EXPECT_EQ(co_await failure_of(c.get_many(std::move(one_bad))), "bad_request");
                                EXPECT_EQ(co_await c.set(std::string(250, 'k'), "v"),
                                          kv::store_outcome::stored);
                                EXPECT_EQ(co_await accepted(ts), 1u);
                                co_await c.close();
                                EXPECT_EQ(co_await failure_of(c.get("k")), "bad_request") << "closed";
                                EXPECT_THROW(kv::client(kv::client_config{}), std::invalid_argument);
                                co_await ts.stop();
                            }),
              0);
}

// The registered-buffer calls without RDMA on the shard (the host has no device; they work over
// TCP by copying in the guest test kv_rdma.zero_copy_calls_over_tcp_copy): refused before sending.
TEST(kv_client, registered_buffer_calls_without_rdma_are_refused_before_sending) {
    EXPECT_EQ(
        run_in_shards(1,
                      []() -> future<> {
                          test_server ts;
                          co_await ts.start();
                          kv::client c(config_of({ts.addr}));
                          net::rdma::buffer none;
                          EXPECT_EQ(co_await failure_of(c.set_from("k", none, 0, 0)), "bad_request");
                          EXPECT_EQ(co_await failure_of(c.cas_from("k", none, 0, 0, 1)), "bad_request");
                          EXPECT_EQ(co_await failure_of(c.get_into("k", none)), "bad_request");
                          EXPECT_EQ(co_await failure_of(c.get_into("bad key", none)), "bad_request");
                          const std::vector<std::string> good{"a", "b"}, bad{"a", "bad key"};
                          EXPECT_EQ(co_await failure_of(c.get_many_into(good, none, 100)), "bad_request");
                          EXPECT_EQ(co_await failure_of(c.get_many_into(bad, none, 100)), "bad_request");
                          EXPECT_EQ(co_await accepted(ts), 0u) << "nothing was sent";
                          EXPECT_EQ(kv::get_into_capacity(3, 1000), 56u + 1008 + 16);
                          co_await c.close();
                          co_await ts.stop();
                      }),
        0);
}

TEST(kv_client, request_timeout_breaks_a_silent_connection) {
    EXPECT_EQ(run_in_shards(1,
                            []() -> future<> {
                                // A server that reads requests and never answers.
                                auto ss = net::tcp::listen(net::socket_address::parse("127.0.0.1:0"));
                                auto addr = ss.local_address();
                                auto serve = [&ss]() -> future<> {
                                    auto a = co_await ss.accept();
                                    auto in = a.connection.input();
                                    co_await drain(in);
                                };
                                auto server_done = serve();
                                auto cfg = config_of({addr});
                                cfg.request_timeout = std::chrono::milliseconds(200);
                                kv::client c(cfg);
                                std::string what;
                                auto first = failure_of(c.get("a"), &what);
                                auto second = failure_of(c.set("b", "v"));
                                EXPECT_EQ(co_await std::move(first), "connection");
                                EXPECT_EQ(co_await std::move(second), "connection")
                                    << "the request behind it too";
                                EXPECT_NE(what.find("no reply within 200 ms"), std::string::npos) << what;
                                co_await c.close();
                                co_await std::move(server_done);
                            }),
              0);
}
