#include "rpc/client_pool.hh"

#include "core/log.hh"

namespace shoal::rpc {

namespace {
logger pool_log("rpc-pool");
} // namespace

client_pool::client_pool(net::transport t, net::socket_address addr, pool_options o)
    : _transport(std::move(t))
    , _addr(addr)
    , _options(o)
    , _members(std::max(1u, o.connections)) {}

unsigned client_pool::connected() const noexcept {
    unsigned n = 0;
    for (const auto& m : _members) {
        n += m.conn && m.conn->connected();
    }
    return n;
}

future<bool> client_pool::reconnect(member& m) {
    m.connecting = true;
    if (m.conn) {
        m.conn->abort(); // its pending calls have failed already
    }
    auto fresh = std::make_unique<client>(_transport, _options.client);
    bool ok = true;
    try {
        co_await fresh->connect(_addr);
    } catch (...) {
        ok = false;
        pool_log.debug("reconnecting to {}: {}", _addr.to_string(), std::current_exception());
    }
    m.connecting = false;
    if (ok && !_closed) {
        m.conn = std::move(fresh);
        m.backoff = std::chrono::milliseconds(0);
        co_return true;
    }
    m.conn.reset();
    m.backoff = std::clamp(m.backoff * 2, _options.backoff_min, _options.backoff_max);
    m.retry_at = steady_clock_type::now() + m.backoff;
    co_return false;
}

future<client*> client_pool::pick() {
    if (_closed) {
        throw connection_error("rpc::client_pool is closed");
    }
    size_t n = _members.size();
    auto usable = [](const member& m) { return m.conn && m.conn->connected(); };
    auto due = [](const member& m, steady_clock_type::time_point now) {
        return !m.connecting && now >= m.retry_at && !(m.conn && m.conn->connected());
    };
    // First choice: the next connected member, round-robin; members that are down and due for
    // a retry reconnect in the background meanwhile.
    for (size_t i = 0; i < n; ++i) {
        auto& m = _members[(_next + i) % n];
        if (usable(m)) {
            auto now = steady_clock_type::now();
            for (auto& other : _members) {
                if (due(other, now)) {
                    (void)reconnect(other);
                }
            }
            _next = (_next + i + 1) % n;
            co_return m.conn.get();
        }
    }
    // None: reconnect the members whose back-off has passed, one at a time.
    auto now = steady_clock_type::now();
    for (size_t i = 0; i < n; ++i) {
        auto& m = _members[(_next + i) % n];
        if (!due(m, now)) {
            continue;
        }
        if (co_await reconnect(m)) {
            co_return m.conn.get();
        }
    }
    throw connection_error("rpc::client_pool: no connection to " + _addr.to_string() + " (reconnecting)");
}

future<> client_pool::close() {
    _closed = true;
    for (auto& m : _members) {
        while (m.connecting) {
            co_await sleep(std::chrono::milliseconds(1));
        }
        if (m.conn) {
            co_await m.conn->close();
        }
    }
}

} // namespace shoal::rpc
