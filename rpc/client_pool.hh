#pragma once

#include "core/clock.hh"
#include "core/coroutine.hh"
#include "core/future.hh"
#include "rpc/client.hh"

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

namespace shoal::rpc {

/// Size and reconnection policy of a `client_pool`.
struct pool_options {
    /// Connections to the server.
    unsigned connections = 4;
    /// First wait before reconnecting a failed connection; doubles on each failure.
    std::chrono::milliseconds backoff_min{10};
    /// Longest wait between reconnection attempts.
    std::chrono::milliseconds backoff_max{1000};
    /// Options of each connection.
    client_options client;
};

/// N connections to one server (on the calling shard), calls spread over them round-robin.
/// Connections are made on first use; a connection that fails is replaced on a later call, no
/// sooner than its back-off allows (doubling from backoff_min to backoff_max after each failed
/// attempt). While no connection is usable, calls fail at once with connection_error.
///
///     rpc::client_pool pool(net::make_transport("tcp"), addr, {.connections = 8});
///     int sum = co_await pool.call<&add>(1, 2);
class client_pool {
public:
    /// A pool of connections to `addr` through `t`.
    client_pool(net::transport t, net::socket_address addr, pool_options o = {});
    client_pool(const client_pool&) = delete;
    client_pool& operator=(const client_pool&) = delete;

    /// `client::call` on the next usable connection (connecting it if needed).
    template <auto F, typename... A>
    future<call_result_t<F>> call(A... args) {
        client* c = co_await pick();
        co_return co_await c->call<F>(std::move(args)...);
    }
    /// `client::call_for` on the next usable connection.
    template <auto F, typename... A>
    future<call_result_t<F>> call_for(steady_clock_type::duration timeout, A... args) {
        client* c = co_await pick();
        co_return co_await c->call_for<F>(timeout, std::move(args)...);
    }
    /// Closes every connection.
    future<> close();
    /// Connections usable now.
    unsigned connected() const noexcept;

private:
    struct member {
        std::unique_ptr<client> conn;
        bool connecting = false;
        std::chrono::milliseconds backoff{0};
        steady_clock_type::time_point retry_at{};
    };
    /// The next usable connection, reconnecting one whose back-off has passed.
    future<client*> pick();
    future<bool> reconnect(member& m);

    net::transport _transport;
    net::socket_address _addr;
    pool_options _options;
    std::vector<member> _members;
    size_t _next = 0;
    bool _closed = false;
};

} // namespace shoal::rpc
