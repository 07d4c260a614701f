#pragma once

#include "core/future.hh"
#include "core/metrics.hh"
#include "core/sharded.hh"
#include "core/timer.hh"
#include "kv/protocol/protocol.hh"
#include "kv/server/reply_batch.hh"
#include "kv/server/stats_format.hh"
#include "kv/store/store.hh"
#include "net/server_connections.hh"
#include "net/socket_address.hh"
#include "net/stream.hh"
#include "net/tcp/tcp.hh"

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <string>

namespace shoal::kv {

/// What every shard's server is configured with (copied to each shard).
struct server_config {
    /// Each shard's store (its memory limit is already the shard's share of -m).
    store_config store;
    /// The parser's limits (max item size, line limits).
    parser_limits limits;
    /// -c: connections over all shards; a connection past it gets memcached's
    /// "ERROR Too many open connections" and is closed.
    unsigned max_connections = 1024;
    /// The server's -m (for `stats`).
    size_t limit_maxbytes = 64 << 20;
    /// Stop: how long connections may drain before they are aborted.
    std::chrono::milliseconds drain_timeout{2000};
    /// Reply bytes a connection gathers before it hands them to the socket (back-pressure
    /// applies there: a client that does not read stops being read).
    size_t reply_flush_bytes = 64 * 1024;
    /// Values of at least this many bytes are sent from item memory (the item is referenced
    /// until the socket is done with it) instead of being copied into the reply; get, gets,
    /// gat and gats only.
    size_t zero_copy_min = 16 * 1024;
    /// A storage request's data block of at least this many bytes that has not fully arrived
    /// with its line is not buffered on the side: its bytes go straight into memory reserved
    /// in the key's store as they arrive (so in-flight values count against -m, and a full
    /// cache evicts for them or refuses with memcached's out-of-memory error; such values may
    /// hold at most half of a store, or one largest item, so that stalled senders cannot starve
    /// the others). Classic set/add/replace/cas link the received item in place. Smaller
    /// incomplete blocks wait in the connection's buffer.
    size_t stream_value_min = 2048;
    /// memcached's idle_timeout: a connection that sends nothing for this long while the
    /// server waits for a request is closed. 0: never.
    std::chrono::seconds idle_timeout{0};
    /// Whether each shard's store follows the wall clock (a 1 s timer, as memcached's clock);
    /// tests turn it off and set the time themselves.
    bool tick_clock = true;
    /// The TCP port for `stats settings`.
    uint16_t port = 11211;
    /// Makes each shard's page source (called on the shard, with the page size and the most
    /// pages the store uses); null: heap pages. The RDMA front end needs registered pages.
    std::function<std::unique_ptr<page_source>(size_t page_size, size_t pages)> page_source_factory;
};

/// Counters shared by all shards (connection admission).
struct shared_counters {
    std::atomic<unsigned> connections{0};
};

/// One shard of `shoal-kv`: the shard's store and a memcached text-protocol server on the
/// shared port (SO_REUSEPORT). A request for a key another shard owns is executed there with
/// `submit_to`; a multi-get sends one batch per owning shard. Use as `sharded<server>`.
class server {
public:
    /// `peers` is the sharded object this instance belongs to; `counters` outlives it.
    server(server_config cfg, sharded<server>* peers, shared_counters* counters);

    /// Listens on `addr` and starts accepting. Throws what listen throws.
    void start(const net::socket_address& addr);
    /// Stops accepting, ends every connection (input first; connections that do not drain
    /// within the drain timeout are aborted) and resolves when all are gone.
    future<> stop();

    /// The address listened on.
    net::socket_address local_address() const { return _ss.local_address(); }
    /// This shard's store.
    kv::store& store() noexcept { return _store; }
    /// This shard's connection counters. `rejected_connections` counts both refusals: over -c,
    /// and by the listener when no descriptor was left (as memcached counts both).
    connection_stats conn_stats() const noexcept {
        connection_stats c = _conn;
        c.rejected_connections += _ss.refused_connections() - _refused_at_reset;
        return c;
    }
    /// memcached's general `stats` of the whole server (every shard's counters summed), as the
    /// text protocol answers them: `STAT name value` lines and END.
    future<std::string> general_stats();
    /// Server time per read of requests: from the read that brought them to their replies
    /// flushed (the requests of one read share one sample; reads without a reply have none).
    const metrics::histogram& request_latency() const noexcept { return _latency; }

private:
    /// Admits an accepted connection under -c (or answers memcached's refusal) and serves it.
    future<> admit(net::connected_socket s);
    /// Serves one connection until it ends.
    future<> serve(net::connected_socket s);
    bool try_local(const request& r, reply_batch& reply, bool& close);
    future<> handle_remote(const request& r, reply_batch& reply, net::output_stream& out);
    future<> handle_get(const request& r, reply_batch& reply, net::output_stream& out);
    future<> handle_stats(const request& r, reply_batch& reply);
    /// What `stats` reports about this process and its settings.
    server_info info() const;
    future<> write_reply(net::output_stream& out, reply_batch& reply);
    /// Takes the data block of storage request `r` (its line parsed; `first` holds the block's
    /// bytes that came with it, less than the whole block) into memory reserved in the key's
    /// store as it arrives from `in` (reads abortable by `as` when not null), and executes the
    /// request there. Bytes read past the
    /// block are put back into `in`. When no memory can be reserved, marks `r` no_memory and
    /// returns the block bytes still to be skipped (the caller executes the refusal); else 0.
    future<uint64_t> take_value(net::input_stream& in, abort_source* as, request& r, std::string_view first,
                                reply_batch& reply);
    /// Reserves `len` bytes of item memory for the value of storage request `r` landing here
    /// (`in_place`: the item takes `r`'s flags and exptime); null when values in flight would
    /// take more than their share of the store or the store has no room.
    item* reserve_landing(const request& r, size_t len, bool in_place);
    void add_get_key(const request& r, std::string_view key, uint64_t h, reply_batch& reply);

    server_config _cfg;
    sharded<server>* _peers;
    shared_counters* _shared;
    kv::store _store;
    net::server_socket _ss;
    net::server_connections _conns;
    connection_stats _conn;
    uint64_t _refused_at_reset = 0; // the listener's refusals when `stats reset` last ran
    metrics::histogram _latency = metrics::histogram::exponential(1e-6, 2, 24); // 1 us .. 8 s
    timer<> _clock;
    uint32_t _started;
};

/// Starts `servers` listening on `addr` on every shard: shard 0 first, so that a port 0 becomes
/// one port the other shards then share (SO_REUSEPORT). Resolves with the address.
future<net::socket_address> listen_on_all_shards(sharded<server>& servers, net::socket_address addr);

} // namespace shoal::kv
