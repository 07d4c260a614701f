#pragma once

// What the kv tests on loopback share: running a body on N shards and an in-process shoal-kv.
#include "core/coroutine.hh"
#include "core/sharded.hh"
#include "core/smp.hh"
#include "kv/server/server.hh"

#include <functional>

namespace shoal::kv_test {

/// Runs `body` on shard 0 of `smp` unpinned shards; 0 when it returned without an exception.
inline int run(unsigned smp, std::function<future<>()> body) {
    smp_options o;
    o.smp = smp;
    o.pin = false;
    return run_shards(o, [body = std::move(body)]() -> future<int> { return body().then([] { return 0; }); });
}

/// A running server of `shard_count()` shards on 127.0.0.1, port picked by the kernel.
struct test_server {
    kv::shared_counters counters;
    sharded<kv::server> servers;
    net::socket_address addr;

    future<> start(kv::server_config cfg = {}) {
        co_await servers.start(cfg, &servers, &counters);
        addr = co_await kv::listen_on_all_shards(servers, net::socket_address::parse("127.0.0.1:0"));
    }
    future<> stop() { return servers.stop(); }
};

} // namespace shoal::kv_test
