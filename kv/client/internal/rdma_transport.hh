#pragma once

#include "core/clock.hh"
#include "core/future.hh"
#include "core/timer.hh"
#include "kv/client/internal/client_transport.hh"
#include "kv/client/internal/location_cache.hh"
#include "kv/client/rdma_client_options.hh"
#include "kv/messages/rdma_wire.hh"
#include "kv/store/internal/record.hh"
#include "net/rdma/connection.hh"
#include "net/socket_address.hh"

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace shoal::kv {

/// Counters of one `rdma_transport` (tests, the benchmark).
struct rdma_client_stats {
    uint64_t direct_reads = 0;     ///< GETs served by a READ of a cached location (no server CPU)
    uint64_t cache_misses = 0;     ///< cached locations that no longer validated
    uint64_t control_gets = 0;     ///< GET control round trips
    uint64_t inline_values = 0;    ///< of which answered with the value inline
    uint64_t reads = 0;            ///< RDMA READs of records
    uint64_t invalid_reads = 0;    ///< READs whose record did not validate (raced a change)
    uint64_t inline_puts = 0;      ///< stores with the value inline
    uint64_t granted_puts = 0;     ///< stores through grant → WRITE_WITH_IMM → commit
    uint64_t zero_copy_puts = 0;   ///< of which WRITTEN straight from the caller's buffer (`store_from`)
    uint64_t zero_copy_gets = 0;   ///< GETs whose record was READ and validated in the caller's
                                   ///< buffer (`get_into`; not its inline answers, which are copied)
    uint64_t connections = 0;      ///< RDMA connections made (one per server shard)
    uint64_t connect_attempts = 0; ///< connection attempts (a set of shards, or one shard, each)
    uint64_t connect_failures = 0; ///< of which failed
    uint64_t backoff_refusals = 0; ///< requests failed at once during a reconnect back-off
    uint64_t timeouts = 0;         ///< shard connections broken by the request timeout
    /// With `rdma_client_options::time_cached_gets`: GETs served by a cached location, timed, and
    /// their nanoseconds in three parts (their sum ends where `get_one`'s coroutine returns).
    uint64_t timed_gets = 0;
    uint64_t timed_before_ns = 0; ///< `get_one` entered → READ issued (lookup, pool buffer)
    uint64_t timed_read_ns = 0;   ///< READ issued → resumed by its completion: the post (at the
                                  ///< end of the task round), rxe, the CQ poller, the wake-up
    uint64_t timed_after_ns = 0;  ///< resumed → value ready (validation and checksum, copy)
};

namespace internal {

/// `client_transport` over the native RDMA protocol (docs/kv.md): one RDMA connection per
/// server shard (port P + shard, found with a hello to P), keys routed to their shard by the
/// server's own hash. GET: a READ of a cached location when there is one, else a control round
/// trip answered inline or with a location to READ; every READ is validated (kv/store/internal/record.hh) and
/// retried through the server when it raced a change. PUT: inline, or grant → one
/// WRITE_WITH_IMM of the value from a registered buffer (the immediate is the commit token) →
/// the server's reply. `store_from` / `get_into` WRITE from / READ into the caller's registered
/// buffer instead of a pool buffer of their own (no copy). Requests are pipelined: any number in flight per
/// connection. A request not answered within `request_timeout` breaks its shard connection; a broken shard
/// connection is made again on the next request to it, with an exponential back-off after failed attempts.
class rdma_transport final : public client_transport {
public:
    /// A transport to the server whose shard 0 listens at `addr`, number `index` in the client's
    /// list (for errors).
    rdma_transport(net::socket_address addr, unsigned index, std::chrono::milliseconds connect_timeout,
                   rdma_client_options opts);
    ~rdma_transport() override;

    future<std::vector<std::optional<fetched_value>>> get(std::vector<std::string> keys) override;
    future<store_outcome> store(store_op op, std::string_view key, std::string_view value, uint32_t flags,
                                int64_t exptime, uint64_t cas_unique) override;
    future<store_outcome> store_from(store_op op, std::string_view key, net::rdma::local_span src,
                                     uint32_t flags, int64_t exptime, uint64_t cas_unique) override;
    future<std::optional<placed_value>> get_into(std::string_view key, net::rdma::local_span dst) override;
    future<bool> remove(std::string_view key) override;
    future<std::optional<uint64_t>> delta(bool incr, std::string_view key, uint64_t delta) override;
    future<bool> touch(std::string_view key, int64_t exptime) override;
    future<std::optional<fetched_value>> gat(std::string_view key, int64_t exptime) override;
    future<server_stats> server_statistics() override;
    future<> flush_all(int64_t delay) override;
    future<> close() override;

    /// One key's value (the building block of `get`). A cached location is READ without a
    /// coroutine; anything else goes through `read_value`.
    future<std::optional<fetched_value>> get_one(std::string_view key) override;
    /// Drops every cached location (the next GETs take the control path).
    void forget_locations() noexcept { _cache.clear(); }
    /// This transport's counters.
    const rdma_client_stats& stats() const noexcept { return _stats; }
    /// The current reconnect back-off (0 after a successful connect).
    std::chrono::milliseconds backoff() const noexcept { return _backoff; }

private:
    using location = record_location;
    struct reply {
        wire::response h;
        std::string value; ///< inline bytes
    };
    struct pending {
        promise<reply> done;
        promise<reply> granted; ///< grant: the first reply (the slice)
        bool awaiting_grant = false;
        lowres_clock::time_point deadline; ///< with a request timeout: when it fails
    };
    struct shard_conn;

    /// Ready at once when every shard connection is up (no coroutine frame on the GET path), else
    /// `connect_now`.
    future<> connect_all() { return connected() ? make_ready_future<>() : connect_now(); }
    /// Whether the whole set of shard connections is up and none is broken.
    bool connected() const noexcept;
    future<> connect_now();
    /// Connects the whole set (first use: hello, then every shard) or the broken shards.
    future<> reconnect();
    /// Breaks every shard connection with a request past its deadline (the watchdog).
    void check_deadlines() noexcept;
    /// A new request's deadline (`time_point::max()` without a request timeout).
    lowres_clock::time_point deadline() const noexcept {
        return _opts.request_timeout.count() ? lowres_clock::now() + _opts.request_timeout
                                             : lowres_clock::time_point::max();
    }
    /// `e` (a failed one-sided operation on `s`) as a `connection` error; `s` is broken.
    client_error broken_by(shard_conn& s, const std::exception& e) noexcept;
    /// Before a command: open, connected.
    future<> ready();
    /// Before a command that changes `key`: `ready`, its cached location dropped.
    future<> prepare_write(const std::string& key) {
        _cache.erase(key); // its location is about to change
        return ready();
    }
    /// A command about `key` answered ok (true) or not_found (false); other statuses fail it,
    /// named `what`. `moves`: it changes the key's location (`prepare_write`, else `ready`).
    future<bool> found_or_missing(wire::request q, std::string key, const char* what, bool moves);
    future<std::shared_ptr<shard_conn>> connect_shard(unsigned shard);
    future<> receive_loop(std::shared_ptr<shard_conn> s);
    future<reply> call(unsigned shard, const wire::request& q, std::string_view key, std::string_view value,
                       std::optional<future<reply>>* granted = nullptr);
    /// Where a timed cached GET's time went (`rdma_client_options::time_cached_gets`).
    struct get_timing {
        std::chrono::steady_clock::time_point start, posted, completed;
    };
    /// The GET of `key` (cached location, else control round trip; READs validated, retried).
    /// `Result` says where the value goes: `fetched_value`, copied out of a pool buffer (`dst`
    /// unused); `placed_value`, READ into `dst` and left there (an inline answer is copied to
    /// its start). With `touch`, a gat: no cached location, the server sets that exptime as it
    /// answers (the value inline whenever it fits a message).
    template <typename Result>
    future<std::optional<Result>> read_value(std::string key, net::rdma::local_span dst,
                                             std::optional<int64_t> touch = std::nullopt);
    /// The control request of `read_value`'s round `round` for `key` (counted in `control_gets`):
    /// a gat with `touch`; after round 0 a READ raced a change (the value wanted inline). Fails
    /// past `read_retries` rounds.
    wire::request get_request(const std::string& key, std::optional<int64_t> touch, unsigned round);
    /// The server's answer `r` to that request (not `not_found`): a status other than ok fails it;
    /// the location is remembered; an inline value is returned (copied into `dst` for
    /// `placed_value`), else nullopt with `loc` set to the record to READ (which must fit `dst`).
    template <typename Result>
    std::optional<Result> take_get_reply(const std::string& key, unsigned shard, reply& r,
                                         const net::rdma::local_span& dst, location& loc);
    /// Where `read_value` READs `loc`: `dst` for `placed_value`, else `b`, a pool buffer it
    /// allocates.
    template <typename Result>
    static net::rdma::local_span read_target(const location& loc, const net::rdma::local_span& dst,
                                             net::rdma::buffer& b);
    /// Counts a GET served by a READ of its cached location, and its `timing` (when timed) in the
    /// `timed_*` counters.
    void count_direct_read(const std::optional<get_timing>& timing) noexcept;
    /// The GET's result from the validated record `v` (READ into `dst` for `placed_value`).
    template <typename Result>
    Result value_read(const record::view& v, const net::rdma::local_span& dst);
    /// A store; with `src` (non-empty) a granted value is WRITTEN from it, else from a copy of
    /// `value`.
    future<store_outcome> put(store_op op, std::string_view key, std::string_view value,
                              net::rdma::local_span src, uint32_t flags, int64_t exptime,
                              uint64_t cas_unique);
    /// The cached location of `key` when a GET can READ it at once (open, every shard connected,
    /// not timing GETs, the record no longer than `max_len`), else null.
    const location* cached(std::string_view key, uint32_t max_len) const noexcept;
    /// The READ of a cached location on `s` failed with `error`: the `connection` error to fail
    /// the GET with (`s` is broken).
    std::exception_ptr read_error(shard_conn& s, std::exception_ptr error) noexcept;
    /// A GET served by a READ of `key`'s cached location `loc` (see `cached_read`); into `dst`
    /// for `placed_value`, into a pool buffer of its own for `fetched_value`.
    template <typename Result>
    future<std::optional<Result>> read_cached(const location& loc, std::string_view key,
                                              net::rdma::local_span&& dst);
    template <typename Result>
    struct cached_read;
    /// A cached READ whose record did not validate (it raced a change): the location is dropped
    /// (the GET goes on through the server).
    void stale(std::string_view key) noexcept;
    /// The record READ into `buf` (`len` bytes) when it validates as `key`'s and has not expired,
    /// else nullopt (counted in `invalid_reads`).
    std::optional<record::view> decode(const char* buf, uint32_t len, std::string_view key);
    void remember(const std::string& key, const wire::response& h, unsigned shard);
    void fail_all(shard_conn* s, std::exception_ptr ex) noexcept;
    unsigned shard_of_key(std::string_view key) const noexcept;
    [[noreturn]] void fail(client_errc code, const std::string& why) const;
    std::string name() const;

    net::socket_address _addr;
    unsigned _index;
    std::chrono::milliseconds _connect_timeout;
    rdma_client_options _opts;
    std::vector<std::shared_ptr<shard_conn>> _shards;  ///< shared with their receive loops
    unsigned _shard_count = 0;                         ///< as the server's hello announced
    std::optional<std::vector<promise<>>> _connecting; ///< waiters while connecting
    location_cache _cache;
    uint32_t _next_id = 1;
    uint32_t _server_now = 0;                             ///< the server's clock in its last reply
    std::chrono::steady_clock::time_point _server_now_at; ///< when that reply came
    bool _closed = false;
    std::chrono::milliseconds _backoff{0}; ///< the current reconnect back-off (0: none)
    lowres_clock::time_point _retry_at;    ///< no connect attempt before this
    timer<lowres_clock> _watchdog;         ///< checks deadlines (with a request timeout)
    unsigned _receivers = 0;
    std::optional<promise<>> _receivers_done;
    rdma_client_stats _stats;
};

} // namespace internal
} // namespace shoal::kv
