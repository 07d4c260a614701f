#pragma once

// The KV-over-RDMA tests' fixture (guest tests): shoal-kv's TCP and RDMA front ends on every shard
// of the test's engine over one store in registered memory, clients of it, and values that name
// their key and version so that a wrong or torn value is recognised.
#include "../rdma/rdma_test_util.hh"
#include "kv/client/client.hh"
#include "kv/client/internal/rdma_transport.hh"
#include "kv/server/rdma_server.hh"
#include "kv/server/registered_page_source.hh"
#include "kv/server/server.hh"
#include "kv/store/hash.hh"

#include <csignal>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace shoal::kv_test {

using namespace shoal::rdma_test;

/// shoal-kv on every shard: TCP text protocol and the native RDMA protocol on one store each.
struct rdma_kv {
    kv::shared_counters counters;
    sharded<kv::server> servers;
    sharded<kv::rdma_server> rdma;
    net::socket_address tcp_addr;
    net::socket_address rdma_addr;

    /// Starts both front ends; the RDMA one on `port` (+ shard), or on fresh ports when 0.
    future<> start(kv::rdma_server_config rc = {}, size_t shard_memory = size_t(24) << 20,
                   uint16_t port = 0) {
        kv::server_config cfg;
        cfg.store.memory_limit = shard_memory;
        cfg.store.remote_readable = true;
        cfg.page_source_factory = [](size_t page, size_t pages) -> std::unique_ptr<kv::page_source> {
            return std::make_unique<kv::registered_page_source>(rdma::shard_context::local().pd(), page,
                                                                pages, false);
        };
        co_await servers.start(cfg, &servers, &counters);
        tcp_addr =
            co_await kv::listen_on_all_shards(servers, net::socket_address::from_host_port(env().ip, 0));
        if (port == 0) {
            port = next_port();
            for (unsigned s = 1; s < shard_count(); ++s) {
                next_port(); // P + s stays ours
            }
        }
        co_await rdma.start(rc, &servers);
        rdma_addr = co_await kv::rdma_listen_on_all_shards(rdma, addr(port));
    }
    future<> stop() {
        co_await rdma.stop();
        co_await servers.stop();
    }
    /// Sum of a counter over the shards.
    template <typename F>
    future<uint64_t> sum(F f) {
        uint64_t n = 0;
        for (unsigned s = 0; s < shard_count(); ++s) {
            n += co_await rdma.invoke_on(s, [f](kv::rdma_server& r) { return uint64_t(f(r)); });
        }
        co_return n;
    }
    /// References held on items, all shards (0 when no grant or reply holds item memory).
    future<uint64_t> refs() {
        uint64_t n = 0;
        for (unsigned s = 0; s < shard_count(); ++s) {
            n += co_await servers.invoke_on(s, [](kv::server& r) { return uint64_t(r.store().refs_held()); });
        }
        co_return n;
    }
    std::vector<std::unique_ptr<kv::client>> clients;
    std::vector<std::unique_ptr<kv::internal::rdma_transport>> transports;

    /// A kv::client of this server over `t` (closed by `close_clients`).
    kv::client& client(kv::endpoint_transport t) {
        clients.push_back(std::make_unique<kv::client>(client_cfg(t)));
        return *clients.back();
    }
    /// An RDMA transport to this server (closed by `close_clients`).
    kv::internal::rdma_transport& transport(kv::rdma_client_options o = {}) {
        transports.push_back(std::make_unique<kv::internal::rdma_transport>(rdma_addr, 0, patience, o));
        return *transports.back();
    }
    future<> close_clients() {
        for (auto& c : clients) {
            co_await c->close();
        }
        for (auto& tr : transports) {
            co_await tr->close();
        }
    }
    kv::client_config client_cfg(kv::endpoint_transport t) const {
        kv::client_config c;
        const net::socket_address& a = t == kv::endpoint_transport::rdma ? rdma_addr : tcp_addr;
        c.servers = {{env().ip, a.port(), 1, t}};
        c.connect_timeout = patience; // the connection is never what these tests time
        return c;
    }
};

/// Runs `body` against a fresh server; clients are closed and the server stopped even when the
/// body fails (its exception is then rethrown).
template <typename Body>
future<> with_kv(Body body, kv::rdma_server_config rc = {}, size_t shard_memory = size_t(24) << 20) {
    rdma_kv kvs;
    co_await kvs.start(rc, shard_memory);
    std::exception_ptr err;
    try {
        co_await body(kvs);
    } catch (...) {
        err = std::current_exception();
    }
    co_await kvs.close_clients();
    co_await kvs.stop();
    if (err) {
        std::rethrow_exception(err);
    }
}

/// Polls `cond` (a coroutine returning whether its condition holds, e.g. a sum over the shards)
/// every 10 ms until it holds or `timeout` passes; returns whether it held.
template <typename Cond>
future<bool> eventually_async(Cond cond, std::chrono::milliseconds timeout = patience) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!co_await cond()) {
        if (std::chrono::steady_clock::now() > deadline) {
            co_return false;
        }
        co_await sleep(std::chrono::milliseconds(10));
    }
    co_return true;
}

/// ibv_reg_mr calls of the shards' pools so far (they grow with traffic, whatever the protocol).
inline future<uint64_t> pool_registrations() {
    uint64_t n = 0;
    for (unsigned s = 0; s < shard_count(); ++s) {
        n += co_await submit_to(s, [] { return rdma::shard_context::local().pool().stats().registrations; });
    }
    co_return n;
}

/// A value of `n` bytes that names its key and version, so a wrong or torn one is recognised.
inline std::string value_of(std::string_view key, unsigned version, size_t n) {
    std::string v = std::string(key) + "#" + std::to_string(version) + "#";
    v.resize(std::max(n, v.size()), '.');
    for (size_t i = v.find_last_of('#') + 1; i < v.size(); ++i) {
        v[i] = char('a' + (i * 7 + version) % 26);
    }
    return v;
}

/// The value of `key` fetched over `t`, or "<miss>".
inline future<std::string> fetch(kv::internal::rdma_transport& t, std::string key) {
    auto v = co_await t.get_one(std::move(key));
    co_return v ? v->data : std::string("<miss>");
}

/// A key owned by `shard` (of `shards`), starting from `prefix`.
inline std::string key_on(unsigned shard, unsigned shards, std::string prefix) {
    for (unsigned i = 0;; ++i) {
        std::string k = prefix + std::to_string(i);
        if (kv::shard_of(kv::hash_key(k), shards) == shard) {
            return k;
        }
    }
}

/// A child process of the test (`spawn_child`): its pid and a file where it reports progress.
struct child_process {
    pid_t pid = -1;
    std::string progress;

    child_process() = default;
    child_process(child_process&& o) noexcept
        : pid(std::exchange(o.pid, -1))
        , progress(std::move(o.progress)) {
        o.progress.clear();
    }
    child_process& operator=(child_process&&) = delete;

    /// "ops bad" as last written (0 0 before the first write).
    std::pair<uint64_t, uint64_t> read() const {
        std::ifstream in(progress);
        uint64_t ops = 0, bad = 0;
        in >> ops >> bad;
        return {ops, bad};
    }
    /// Stops the child (SIGSTOP) and returns once every thread of it has stopped: a stop is
    /// asynchronous, and a shard still polling on another CPU could answer one more request.
    future<> pause() {
        ::kill(pid, SIGSTOP);
        for (;;) {
            int status = 0;
            pid_t rc = ::waitpid(pid, &status, WNOHANG | WUNTRACED);
            if (rc == pid && WIFSTOPPED(status)) {
                co_return;
            }
            if (rc != 0) {
                pid = rc == pid ? -1 : pid; // reaped already when it exited
                throw std::runtime_error("the child did not stop: it is gone");
            }
            co_await sleep(1ms);
        }
    }
    /// Sends `sig` (SIGKILL by default) and collects the exit status without blocking the reactor.
    future<int> kill_now(int sig = SIGKILL) {
        ::kill(pid, sig);
        int status = 0;
        while (::waitpid(pid, &status, WNOHANG) == 0) {
            co_await sleep(1ms);
        }
        pid = -1;
        co_return status;
    }
    ~child_process() {
        if (pid > 0) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
        }
        if (!progress.empty()) {
            ::unlink(progress.c_str());
        }
    }
};

/// This binary again as peer `mode` (its `peer_main` gets "mode,progress-file" and `a`).
inline child_process spawn_child(const std::string& mode, const net::socket_address& a) {
    child_process c;
    static unsigned n = 0;
    c.progress = fmt::format("/tmp/kv-child-{}-{}-{}", getpid(), mode, n++);
    ::unlink(c.progress.c_str());
    c.pid = spawn_peer(mode + "," + c.progress, a.to_string());
    return c;
}

} // namespace shoal::kv_test
