#pragma once

#include "core/future.hh"
#include "core/gate.hh"
#include "core/sharded.hh"
#include "core/timer.hh"
#include "kv/messages/rdma_wire.hh"
#include "kv/store/store.hh"
#include "net/rdma/connection.hh"
#include "net/socket_address.hh"

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string_view>

namespace shoal::kv {

class server;
class registered_page_source;

/// How the native RDMA front end of `shoal-kv` behaves (copied to each shard).
struct rdma_server_config {
    /// GET replies carry values up to this many bytes inline (no READ needed), unless the client
    /// sends its own limit. 8 KB: inline and location + READ cross between 8 and 16 KB (measured,
    /// bench/kv_inline_sweep.sh, docs/performance-history.md, "Inline thresholds, measured").
    size_t inline_get_max = 8192;
    /// A grant not committed within this time is revoked and its memory returns.
    std::chrono::milliseconds grant_timeout{5000};
    /// Epoch length: a freed item chunk waits two epochs before reuse (remote readers of a stale
    /// location meanwhile see the old, invalidated record).
    std::chrono::milliseconds epoch_period{20};
    /// Grants a connection may hold at once (more get `busy`); at most 4096.
    unsigned max_grants = 256;
};

/// Counters of one shard's RDMA front end (read on its shard).
struct rdma_server_stats {
    uint64_t connections = 0; ///< connections open now
    uint64_t total_connections = 0;
    uint64_t requests = 0;       ///< control messages handled
    uint64_t inline_gets = 0;    ///< GET replies with the value inline
    uint64_t location_gets = 0;  ///< GET replies with a location only
    uint64_t grants = 0;         ///< grants made
    uint64_t grants_active = 0;  ///< grants neither committed nor dropped yet
    uint64_t commits = 0;        ///< grants committed by a WRITE_WITH_IMM
    uint64_t grants_expired = 0; ///< revoked by the grant timeout
    uint64_t grants_dropped = 0; ///< dropped with their connection
    uint64_t bad_commits = 0;    ///< immediates with no live grant (late or forged)
    uint64_t bad_requests = 0;   ///< malformed messages
};

/// One shard's native RDMA KV front end: RDMA connections (listen_rc) on `base port + shard`,
/// whose control messages (kv/messages/rdma_wire.hh) act on this shard's store — the store of the
/// `kv::server` of the same shard, whose items live in registered memory
/// (`registered_page_source`), so GET answers with a location a client READs, and PUT grants a
/// slice of a reserved item that the client WRITEs and commits with a tagged WRITE_WITH_IMM.
/// Each grant's slice is its own registration with remote-write access to exactly that slice.
/// Use as `sharded<rdma_server>`, started after `sharded<server>` and stopped before it.
class rdma_server {
public:
    /// Serves the stores of `servers` (this shard's instance).
    rdma_server(rdma_server_config cfg, sharded<server>* servers);
    ~rdma_server();

    /// Listens on `addr`'s address at port `addr.port() + this shard`. Throws what listen throws,
    /// or std::runtime_error when the store's pages are not registered memory.
    void start(const net::socket_address& addr);
    /// Stops accepting, closes every connection, drops their grants; resolves when all are gone.
    future<> stop();

    /// The address listened on.
    net::socket_address local_address() const { return _listener.local_address(); }
    /// This shard's counters.
    const rdma_server_stats& stats() const noexcept { return _stats; }

private:
    struct grant;
    struct conn;

    future<> accept_loop();
    future<> serve(net::rdma::connection c);
    future<> commits_loop(conn& c);
    /// Answers one control message: checked, then handed to the step of its op.
    void handle(conn& c, const char* msg, size_t len);
    /// Answers `r` as a malformed request (counted in `bad_requests`).
    void refuse(conn& c, wire::response& r);
    /// hello, flush_all and stats: the requests about no key.
    void handle_keyless(conn& c, const wire::request& q, size_t len, wire::response& r);
    /// A keyed request's mode, length and key are valid and the key is this shard's: sets `key`
    /// and its hash `h` and returns true, else answers the request and returns false. (Inline:
    /// on the GET path, defined in rdma_server.cc only.)
    inline bool admit_key(conn& c, const wire::request& q, const char* msg, size_t len, wire::response& r,
                          std::string_view& key, uint64_t& h);
    /// get and gat: the value inline when small enough, else its location. (Inline: the GET path.)
    inline void handle_get(conn& c, const wire::request& q, std::string_view key, uint64_t h,
                           wire::response& r);
    /// store: `value` (inline in the request) stored as `q` says.
    void handle_store(conn& c, const wire::request& q, std::string_view key, std::string_view value,
                      uint64_t h, wire::response& r);
    /// grant: an item reserved for the value and a slice of it exported for the client's WRITE.
    void handle_grant(conn& c, const wire::request& q, std::string_view key, uint64_t h, wire::response& r);
    /// incr and decr.
    void handle_delta(conn& c, const wire::request& q, std::string_view key, uint64_t h, wire::response& r);
    void handle_commit(conn& c, uint32_t token);
    future<> flush_everywhere(conn& c, wire::response r, int64_t exptime);
    /// Answers a `stats` request with the whole server's general statistics.
    future<> send_stats(conn& c, wire::response r);
    void reply(conn& c, const wire::response& r, std::string_view inline_value = {});
    void locate(wire::response& r, const item* it) const noexcept;
    void drop_grant(conn& c, grant& g) noexcept;
    void tick();

    rdma_server_config _cfg;
    sharded<server>* _servers;
    kv::store* _store = nullptr;
    registered_page_source* _pages = nullptr;
    net::rdma::listener _listener;
    std::list<conn*> _conns;
    gate _gate;
    timer<> _ticker;
    rdma_server_stats _stats;
    bool _stopping = false;
};

/// Starts `rdma` on every shard, listening on `addr` (port P: shard s listens on P + s). Resolves
/// with the address of shard 0.
future<net::socket_address> rdma_listen_on_all_shards(sharded<rdma_server>& rdma, net::socket_address addr);

} // namespace shoal::kv
