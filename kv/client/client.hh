#pragma once

#include "core/future.hh"
#include "kv/client/client_types.hh"
#include "kv/client/ketama.hh"
#include "kv/client/rdma_client_options.hh"
#include "kv/client/server_endpoint.hh"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shoal::net::rdma {
class buffer;
} // namespace shoal::net::rdma

// The client's transports (kv/client/internal/client_transport.hh, not installed).
namespace shoal::kv::internal {
class client_transport;
enum class store_op;
} // namespace shoal::kv::internal

namespace shoal::kv {

/// What a `kv::client` connects to and how it spreads keys.
struct client_config {
    /// The servers, in the order a libmemcached client would list them (the order matters for
    /// ketama, as it does in libmemcached).
    std::vector<server_endpoint> servers;
    /// Which libmemcached consistent-hashing set-up to reproduce.
    ketama_mode distribution = ketama_mode::weighted;
    /// How long a connection attempt may take.
    std::chrono::milliseconds connect_timeout{2000};
    /// How long a request may wait for its reply (0: no limit). Replies come in order, so a
    /// request that times out breaks its connection: it and every request behind it fail with
    /// a `connection` error, and the next request connects again.
    std::chrono::milliseconds request_timeout{0};
    /// The native RDMA protocol's settings (servers with `endpoint_transport::rdma`; needs
    /// `rdma::start` on the client's shard); `request_timeout` applies to it too.
    rdma_client_options rdma;
};

/// A memcached-protocol client for one shard: keys spread over several servers with ketama
/// (libmemcached-compatible), one pipelined connection per server made on first use (and made
/// again on the next request after it broke). Any number of requests may be in flight; each
/// future resolves with its own reply. Failures are `client_error`s: `bad_request` before
/// anything is sent (bad key), `connection` (refused, broken, garbled reply; every request in
/// flight to that server fails), `server` (ERROR / CLIENT_ERROR / SERVER_ERROR; only that
/// request fails). Keys and values are copied during each call; the `_from` / `_into` calls use
/// a registered buffer of the calling shard's pool (`net::rdma::buffer`) instead, zero-copy over
/// RDMA (docs/kv.md). Arguments and results are plain values so that a C ABI can wrap it. Call
/// `close()` and wait for it before destroying.
class client {
public:
    /// A client of `cfg.servers`. Throws std::invalid_argument when the list is empty or an
    /// address does not parse.
    explicit client(client_config cfg);
    ~client();
    client(const client&) = delete;
    client& operator=(const client&) = delete;

    /// The value of `key`, nullopt when missing.
    future<std::optional<fetched_value>> get(std::string_view key);
    /// The values of `keys` (nullopt where missing), in the order of `keys`: one request per
    /// server holding some of them, all in flight at once. Fails if any of those servers fails.
    future<std::vector<std::optional<fetched_value>>> get_many(std::vector<std::string> keys);
    /// Stores `value` under `key`.
    future<store_outcome> set(std::string_view key, std::string_view value, uint32_t flags = 0,
                              int64_t exptime = 0);
    /// Stores only if `key` is missing (`not_stored` otherwise).
    future<store_outcome> add(std::string_view key, std::string_view value, uint32_t flags = 0,
                              int64_t exptime = 0);
    /// Stores only if `key` exists (`not_stored` otherwise).
    future<store_outcome> replace(std::string_view key, std::string_view value, uint32_t flags = 0,
                                  int64_t exptime = 0);
    /// Stores only if `key` still has the CAS unique `cas_unique` (`exists` if it changed,
    /// `not_found` if it is gone).
    future<store_outcome> cas(std::string_view key, std::string_view value, uint64_t cas_unique,
                              uint32_t flags = 0, int64_t exptime = 0);
    /// Adds `value` after the value of `key`, keeping its flags and exptime (`not_stored` when
    /// the key is missing). Over RDMA a large `value` is granted and WRITTEN like a `set`'s, and
    /// the server joins it to the current value.
    future<store_outcome> append(std::string_view key, std::string_view value);
    /// Adds `value` before the value of `key`; otherwise as `append`.
    future<store_outcome> prepend(std::string_view key, std::string_view value);

    /// `set` of the `length` bytes at `offset` of `src`, a buffer of this shard's RDMA pool. Over
    /// RDMA a granted value (larger than `rdma_client_options::inline_put_max` or one message) is
    /// WRITTEN straight from `src`; an inline one, and any over TCP, is copied. The call holds a
    /// reference on `src`'s memory until the future resolves (the pool does not reuse it even if
    /// `src` is destroyed); do not change those bytes before then. A `bad_request` error when `src`
    /// is empty, from another shard's pool (or the shard has no RDMA), or the range exceeds it.
    future<store_outcome> set_from(std::string_view key, const net::rdma::buffer& src, size_t offset,
                                   size_t length, uint32_t flags = 0, int64_t exptime = 0);
    /// `add` from a registered buffer (as `set_from`).
    future<store_outcome> add_from(std::string_view key, const net::rdma::buffer& src, size_t offset,
                                   size_t length, uint32_t flags = 0, int64_t exptime = 0);
    /// `replace` from a registered buffer (as `set_from`).
    future<store_outcome> replace_from(std::string_view key, const net::rdma::buffer& src, size_t offset,
                                       size_t length, uint32_t flags = 0, int64_t exptime = 0);
    /// `cas` from a registered buffer (as `set_from`).
    future<store_outcome> cas_from(std::string_view key, const net::rdma::buffer& src, size_t offset,
                                   size_t length, uint64_t cas_unique, uint32_t flags = 0,
                                   int64_t exptime = 0);
    /// The value of `key` placed in `dst`, a buffer of this shard's RDMA pool: where it lies there
    /// (nullopt when missing). Over RDMA the record is READ straight into `dst` and validated there
    /// (the value then starts after the record's header: see `placed_value::offset`; a READ that
    /// raced a change is retried into `dst`); an inline answer, and any over TCP, is copied to
    /// offset 0. `dst` needs `get_into_capacity(key.size(), value size)` bytes (TCP: the value's);
    /// a smaller one fails the call with a `bad_request` error naming the size needed (also in
    /// `client_error::needed_capacity()`); nothing is placed then. The call
    /// holds a reference on `dst`'s memory until the future resolves; do not touch its bytes before
    /// then. The same `bad_request` errors as `set_from` for an unusable buffer.
    future<std::optional<placed_value>> get_into(std::string_view key, net::rdma::buffer& dst);
    /// `get_into` restricted to the `capacity` bytes at `offset` of `dst` (`placed_value::offset`
    /// still counts from the start of `dst`); the rest of `dst` is not touched. A range outside
    /// `dst` is a `bad_request`; a range too small for the value is the `bad_request` of
    /// `get_into`, with `client_error::needed_capacity()` set.
    future<std::optional<placed_value>> get_into(std::string_view key, net::rdma::buffer& dst, size_t offset,
                                                 size_t capacity);
    /// The values of `keys` placed in `dst` without a copy over RDMA: key i in the slot of
    /// `slot` bytes at offset i × `slot` (`get_into` restricted to that slot); nullopt where a
    /// key is missing. Every request is in flight at once (over RDMA a key with a cached location
    /// is one READ; the others one control GET each). `slot` should be
    /// `get_into_capacity(longest key, largest value)`. Refused with `bad_request` before
    /// anything is sent when a key is invalid or `keys.size()` × `slot` exceeds `dst`. When a
    /// value does not fit its slot the call fails with the `bad_request` of `get_into`, its
    /// `client_error::needed_capacity()` the largest slot needed by such a value, so the caller
    /// can retry with that; the other errors of `get_many` (a failing server) take precedence.
    /// The call holds `dst`'s memory until it resolves; do not touch its bytes meanwhile.
    future<std::vector<std::optional<placed_value>>> get_many_into(std::vector<std::string> keys,
                                                                   net::rdma::buffer& dst, size_t slot);

    /// Deletes `key`: true when it existed.
    future<bool> remove(std::string_view key);
    /// Adds `delta` to the decimal number stored at `key` (wrapping at 2^64): the new value,
    /// nullopt when missing; a non-numeric value is a `server` error.
    future<std::optional<uint64_t>> incr(std::string_view key, uint64_t delta);
    /// Subtracts `delta` (stopping at 0): the new value, nullopt when missing.
    future<std::optional<uint64_t>> decr(std::string_view key, uint64_t delta);
    /// Gives `key` a new exptime (memcached's: 0 never, negative already expired, up to 30 days
    /// relative, else absolute Unix time) without fetching it: true when it existed. A cached
    /// RDMA location of the key stays valid.
    future<bool> touch(std::string_view key, int64_t exptime);
    /// memcached's gat: the value of `key` (nullopt when missing), given the new `exptime` (as
    /// `touch`'s) as it is fetched, in one round trip to its server. Over RDMA the answer is the
    /// value inline or its location, READ as a GET's (and cached as one).
    future<std::optional<fetched_value>> gat(std::string_view key, int64_t exptime);
    /// memcached's general `stats` of every server, in the order of the server list
    /// (libmemcached's `memcached_stat`); over RDMA one request to any shard of a server, which
    /// sums its shards as the text protocol does. Fails when any server fails.
    future<std::vector<server_stats>> stats();
    /// `stats` of the server at `index` in the server list alone (`bad_request` when there is
    /// no such server).
    future<server_stats> stats_of(size_t index);
    /// memcached's flush_all on every server (libmemcached's `memcached_flush`): what was stored
    /// before now (`delay` 0), or before `delay` (an exptime, memcached's rules), becomes
    /// invisible then, cached RDMA locations included. Fails when any server fails.
    future<> flush_all(int64_t delay = 0);

    /// Index of the server that holds `key` (libmemcached's choice).
    unsigned server_of(std::string_view key) const noexcept { return _ring.server_of(key); }
    /// Number of servers.
    size_t server_count() const noexcept { return _servers.size(); }
    /// Lets requests in flight finish and closes every connection; later requests fail.
    future<> close();

private:
    /// `call(transport)` on the server that holds `key`, once `key` is valid; a bad key (or
    /// anything `call` throws) fails the returned future instead.
    template <typename Call>
    auto on_server_of(std::string_view key, Call call);
    future<store_outcome> store(internal::store_op op, std::string_view key, std::string_view value,
                                uint32_t flags, int64_t exptime, uint64_t cas_unique);
    future<store_outcome> store_from(internal::store_op op, std::string_view key,
                                     const net::rdma::buffer& src, size_t offset, size_t length,
                                     uint32_t flags, int64_t exptime, uint64_t cas_unique);
    std::vector<std::unique_ptr<internal::client_transport>> _servers;
    ketama_ring _ring;
};

/// Throws `client_error` (bad_request) unless `key` is a valid memcached key: 1 to 250 bytes,
/// no spaces or control characters.
void check_key(std::string_view key);

/// The capacity `client::get_into` needs for a value of `value_len` bytes under a key of `key_len`
/// bytes: the whole record a READ fetches (the value, the key and 72 to 79 bytes).
size_t get_into_capacity(size_t key_len, size_t value_len) noexcept;

} // namespace shoal::kv
