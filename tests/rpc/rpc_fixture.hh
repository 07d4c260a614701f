#pragma once

// What the RPC tests share: the handlers (every kind of argument and result, failures, waits a
// test releases), a server with all of them and a client (`fixture`), where a test listens and
// connects (`rpc_env`), and random values of every type.

#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "core/smp.hh"
#include "core/timer.hh"
#include "rpc/client.hh"
#include "rpc/server.hh"
#include "support/patience.hh"

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace shoal::rpc_test {

using namespace std::chrono_literals;
using namespace shoal;

/// Where a suite case listens and connects.
struct rpc_env {
    net::transport transport;
    /// A fresh address (distinct port) on the loopback or RDMA device.
    std::function<net::socket_address()> next_address;
};

using shoal::testing::eventually;
using shoal::testing::patience;

// ---- handlers --------------------------------------------------------------------------------

enum class level : uint8_t { low, mid, high };

struct item {
    std::string key;
    std::vector<int64_t> values;
    std::optional<double> weight;
    friend bool operator==(const item&, const item&) = default;
};

struct everything {
    int8_t a = 0;
    uint16_t b = 0;
    int32_t c = 0;
    uint64_t d = 0;
    float e = 0;
    double f = 0;
    bool g = false;
    level h = level::low;
    std::string i;
    std::vector<item> j;
    std::array<uint32_t, 3> k{};
    std::variant<std::monostate, int32_t, std::string, item> l;
    std::tuple<std::string, int16_t> m;
    std::pair<bool, std::string> n;
    std::map<std::string, item> o;
    std::unordered_map<int32_t, std::vector<std::string>> p;
    friend bool operator==(const everything&, const everything&) = default;
};

inline everything echo_everything(everything v) {
    return v;
}
inline std::string_view echo_view(std::string_view s) {
    return s;
}
inline rpc::bytes_view echo_bytes(rpc::bytes_view b) {
    return b;
}
inline rpc::attachment echo_attachment(rpc::attachment a) {
    return a;
}
inline size_t sizes(std::string_view s, rpc::attachment a, const std::vector<std::string>& v) {
    return s.size() + a.size() + v.size();
}
inline int32_t add(int32_t x, int32_t y) {
    return x + y;
}
inline future<uint64_t> later_double(uint64_t i, uint32_t delay_us) {
    return sleep(std::chrono::microseconds(delay_us)).then([i] { return i * 2; });
}
inline future<std::string> coroutine_concat(std::string a, std::string b) {
    co_await yield();
    co_return a + b;
}
inline void throws_invalid(std::string why) {
    throw std::invalid_argument(why);
}
struct custom_failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};
inline future<int> fails_later() {
    co_await yield();
    throw custom_failure("it broke");
}
inline unsigned which_shard() {
    return this_shard_id();
}
inline std::string not_registered(int) {
    return "never";
}
inline rpc::attachment big_reply(uint32_t size, std::string) {
    return rpc::attachment(net::temporary_buffer::copy_of(std::string(size, 'r')));
}

/// Two overloads share a qualified name (and so a verb id): the server registers one, a caller
/// whose declaration is the other gets signature_mismatch_error.
namespace versions {
inline int32_t lookup(int32_t key) {
    return key + 1;
}
inline int32_t lookup(std::string key) {
    return int32_t(key.size());
}
} // namespace versions

/// A service whose calls wait until the test releases them.
struct gatekeeper {
    std::vector<promise<>> waiting;
    unsigned one_way_hits = 0;
    future<int> wait_here(int v) {
        co_await waiting.emplace_back().get_future();
        co_return v;
    }
    void release() {
        auto all = std::move(waiting);
        for (auto& p : all) {
            p.set_value();
        }
    }
    void hit(unsigned n) { one_way_hits += n; }
    unsigned hits() const { return one_way_hits; }
};

/// Registers every handler of the suite on `s`.
inline void register_all(rpc::server& s, gatekeeper* g) {
    s.register_handler<&echo_everything, &echo_view, &echo_bytes, &echo_attachment, &sizes, &add,
                       &later_double, &coroutine_concat, &throws_invalid, &fails_later, &which_shard,
                       &big_reply>();
    s.register_handler<static_cast<int32_t (*)(int32_t)>(&versions::lookup)>();
    s.register_handler<&gatekeeper::wait_here>(g);
    s.register_handler<&gatekeeper::hit>(g);
    s.register_handler<&gatekeeper::hits>(g);
}

/// A server with every handler, listening on a fresh address, plus a connected client.
struct fixture {
    gatekeeper keeper;
    rpc::server server;
    rpc::client client;
    net::socket_address address;
    fixture(rpc_env& env, rpc::server_options so = {}, rpc::client_options co = {})
        : server(env.transport, so)
        , client(env.transport, co) {
        register_all(server, &keeper);
        address = env.next_address();
        server.listen(address);
        address = server.local_address();
    }
    future<> stop() {
        keeper.release();
        co_await client.close();
        co_await server.stop();
    }
};

inline everything random_everything(std::mt19937_64& rng) {
    auto text = [&] {
        std::string s(rng() % 30, '\0');
        for (auto& c : s) {
            c = char(rng());
        }
        return s;
    };
    auto an_item = [&] {
        item it{text(), {}, std::nullopt};
        for (size_t n = rng() % 4; n > 0; --n) {
            it.values.push_back(int64_t(rng()));
        }
        if (rng() & 1) {
            it.weight = double(rng() % 1000) / 7;
        }
        return it;
    };
    everything v;
    v.a = int8_t(rng());
    v.b = uint16_t(rng());
    v.c = int32_t(rng());
    v.d = rng();
    v.e = float(rng() % 100000) / 3;
    v.f = double(rng()) / 11;
    v.g = rng() & 1;
    v.h = level(rng() % 3);
    v.i = text();
    for (size_t n = rng() % 4; n > 0; --n) {
        v.j.push_back(an_item());
    }
    v.k = {uint32_t(rng()), uint32_t(rng()), uint32_t(rng())};
    switch (rng() % 4) {
    case 0:
        break;
    case 1:
        v.l = int32_t(rng());
        break;
    case 2:
        v.l = text();
        break;
    default:
        v.l = an_item();
    }
    v.m = {text(), int16_t(rng())};
    v.n = {bool(rng() & 1), text()};
    for (size_t n = rng() % 3; n > 0; --n) {
        v.o[text()] = an_item();
        v.p[int32_t(rng())] = {text(), text()};
    }
    return v;
}

} // namespace shoal::rpc_test
