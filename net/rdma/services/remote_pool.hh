#pragma once

#include "core/future.hh"
#include "core/semaphore.hh"
#include "net/rdma/connection.hh"
#include "net/rdma/memory_region.hh"
#include "net/rdma/services/peer.hh"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

namespace shoal::net::rdma {

namespace internal {
class remote_pool_server_state;
} // namespace internal

/// Limits of a `remote_pool_server`.
struct remote_pool_options {
    /// Largest single lease (a request for more is refused as a bad request).
    size_t max_lease = size_t(64) << 20;
    /// Bytes one client (one control connection) may hold at a time.
    size_t client_quota = size_t(64) << 20;
    /// Bytes all clients together may hold (the server-wide watermark).
    size_t watermark = size_t(256) << 20;
};

/// Counters of a `remote_pool_server`; read them on its shard.
struct remote_pool_stats {
    uint64_t clients = 0;            ///< control connections being served now
    uint64_t data_connections = 0;   ///< one-sided connections of peers held now
    uint64_t regions = 0;            ///< regions leased out now
    uint64_t leased_bytes = 0;       ///< their bytes
    uint64_t leases = 0;             ///< leases granted, ever
    uint64_t releases = 0;           ///< regions given back by their client, ever
    uint64_t reclaimed = 0;          ///< regions taken back from clients that went away, ever
    uint64_t quota_refusals = 0;     ///< leases refused by the per-client quota
    uint64_t watermark_refusals = 0; ///< leases refused by the server-wide watermark
    uint64_t bad_requests = 0;       ///< malformed or impossible requests answered with an error
};

/// Why a pool server refused a request (the connection stays usable; nothing changed).
class remote_pool_error : public std::runtime_error {
public:
    /// The refusal's kind, as the server sent it.
    enum class reason : uint32_t {
        quota = 1,
        watermark = 2,
        bad_request = 3,
        unknown_lease = 4,
        no_memory = 5
    };
    remote_pool_error(reason r, const std::string& what)
        : std::runtime_error(what)
        , _reason(r) {}
    /// Which limit or rule refused it.
    reason why() const noexcept { return _reason; }

private:
    reason _reason;
};

/// A region leased from a pool server: `region` is `{addr, rkey, size}`; `id` names it in
/// `release`.
struct remote_lease {
    remote_region region;
    uint64_t id = 0;
};

/// The lending side of seed 003's remote memory pool: serves connections from `peer`s (or any
/// client speaking the protocol, docs/rdma.md "Remote memory pool"). Each lease is memory of
/// its own, registered and exported with remote read and write rights for exactly its range.
/// A control connection is one client: its leases count against `client_quota`, all leases
/// against `watermark`. When the client releases a region, or its control connection ends
/// (closed, broken, or its process died), the server revokes and frees every region it held.
/// Destroying the server closes every connection it serves and revokes everything. Used on one
/// shard (the connections' shard); move-only.
class remote_pool_server {
public:
    /// A server with the limits `o`.
    explicit remote_pool_server(remote_pool_options o = {});
    remote_pool_server(remote_pool_server&&) noexcept;
    remote_pool_server& operator=(remote_pool_server&&) noexcept;
    ~remote_pool_server();

    /// Serves an accepted connection until it ends: a peer's one-sided connection (first message
    /// a `peer_hello`) is held; any other is a client's control connection. Resolves when the
    /// connection ended and its client's regions are reclaimed; never fails.
    future<> serve(connection c);
    /// Counters (regions, bytes, clients now; grants, releases, reclaims, refusals ever).
    const remote_pool_stats& stats() const noexcept;
    /// The limits.
    const remote_pool_options& options() const noexcept;

private:
    std::shared_ptr<internal::remote_pool_server_state> _s;
};

/// The borrowing side: leases regions over a peer's control connection and bump-allocates
/// slices from them for `remote_read`/`remote_write` on the peer's one-sided connections. The
/// client owns the peer's message connection (one request at a time, in order). Used on the
/// peer's shard; the peer must outlive it.
class remote_pool_client {
public:
    /// Default size of the regions `allocate` leases.
    static constexpr size_t default_region_size = size_t(1) << 20;
    /// A client over `p`, leasing regions of `region_size` bytes for `allocate`.
    explicit remote_pool_client(peer& p, size_t region_size = default_region_size);

    /// Leases a region of `size` bytes (1 to the server's `max_lease`). Fails with
    /// remote_pool_error when the quota, the watermark or the request refuses it (the client
    /// stays usable), with connection_closed when the control connection is gone.
    future<remote_lease> lease(size_t size);
    /// Gives a leased region back (its rkey stops working). Fails with remote_pool_error
    /// naming the id when the server does not know it.
    future<> release(const remote_lease& l);
    /// A slice of `size` bytes (aligned to `align`, a power of two) cut from the current
    /// region, leasing a new one of max(region_size, size) bytes when it does not fit.
    future<remote_region> allocate(size_t size, size_t align = 8);
    /// RDMA WRITE of `src` to `offset` of remote `dst`, on the next one-sided connection.
    future<> remote_write(local_span src, const remote_region& dst, uint64_t offset = 0) {
        return _peer->one_sided().write(std::move(src), dst, offset);
    }
    /// RDMA READ of `dst.length` bytes at `offset` of remote `src`, on the next one-sided
    /// connection.
    future<> remote_read(local_span dst, const remote_region& src, uint64_t offset = 0) {
        return _peer->one_sided().read(std::move(dst), src, offset);
    }
    /// The regions held now, in lease order.
    const std::vector<remote_lease>& leases() const noexcept { return _leases; }
    /// Bytes held now.
    size_t leased_bytes() const noexcept;

private:
    struct reply;
    future<reply> request(uint32_t op, uint64_t arg);

    peer* _peer;
    size_t _region_size;
    std::unique_ptr<semaphore> _one_at_a_time;
    std::vector<remote_lease> _leases;
    remote_region _current{};
    uint64_t _used = 0; // bytes of _current handed out
};

} // namespace shoal::net::rdma
