#pragma once

// The native RDMA KV protocol's control messages (wire format 1). Each request and each response
// is one message of the RDMA message API (one SEND); values ride inline or move by one-sided
// READ / WRITE. All integers little endian. See docs/kv.md, "The native RDMA protocol".

#include <cstdint>
#include <cstring>
#include <string_view>

namespace shoal::kv::wire {

/// The protocol version every message carries; a peer answers another one with `bad_version`.
constexpr uint8_t version = 1;
/// The immediate tag (`rdma::connection::immediates`) of commits.
constexpr unsigned commit_tag = 1;

/// Operations.
enum class op : uint8_t {
    hello = 1,  ///< → shards, this shard, server clock, inline limits
    get = 2,    ///< key → location (+ value inline when small)
    store = 3,  ///< key + value inline → stored / not stored / exists / not found
    grant = 4,  ///< key + length → a slice to WRITE into; then a commit → the store's outcome
    remove = 5, ///< key → deleted or not found
    incr = 6,   ///< key, `arg` delta → new value
    decr = 7,   ///< key, `arg` delta → new value
    touch = 8,  ///< key, `exptime` → touched (ok) or not found
    /// no key, `exptime` → ok once every shard of the server has run memcached's flush_all
    /// (at once, or its deadline set); any shard takes it
    flush_all = 9,
    gat = 10, ///< key, `exptime` → as `get`, the item given that exptime first (memcached's gat)
    /// no key → ok with memcached's general `stats` of the whole server inline (`STAT name
    /// value` lines and END, as the text protocol answers); any shard takes it
    stats = 11,
};

/// Storage modes of `store` and `grant` (memcached's).
enum class mode : uint8_t { set = 0, add = 1, replace = 2, cas = 3, append = 4, prepend = 5 };

/// Outcomes.
enum class status : uint8_t {
    ok = 0,          ///< get: found; store/commit: stored; remove: deleted; grant: granted
    not_found = 1,   ///< get miss, remove/delta/cas of a missing key
    not_stored = 2,  ///< add of an existing key, replace of a missing one
    exists = 3,      ///< cas mismatch
    too_large = 4,   ///< value above the item size limit
    no_memory = 5,   ///< the store could not make room
    non_numeric = 6, ///< incr/decr of a value that is not a number
    wrong_shard = 7, ///< the key belongs to shard `aux` (connect there)
    bad_request = 8, ///< malformed (bad key, lengths that do not add up, unknown op)
    bad_version = 9, ///< the request's version is not `wire::version`
    busy = 10,       ///< too many grants in flight on this connection
    expired = 11,    ///< the grant expired before its commit (the slice was revoked)
};

/// `request::options` of a GET: answer with the value inline whenever it fits a message (a
/// client whose READ raced a change retries this way).
constexpr uint8_t want_inline = 1;
/// `request::options` of a GET: `value_len` is the largest value the client wants inline (in place
/// of the server's `inline_get_max`; 0: a location only). A server that predates it ignores it.
constexpr uint8_t client_inline_limit = 2;

/// A request: this header, then the key, then (store) the value.
struct request {
    uint8_t ver = wire::version;
    op code = op::get;
    mode how = mode::set;
    uint8_t options = 0; ///< get: `want_inline`, `client_inline_limit`
    uint16_t key_len = 0;
    uint16_t reserved2 = 0;
    uint32_t id = 0;        ///< the client's request number, echoed in the response(s)
    uint32_t value_len = 0; ///< store: inline value bytes; grant: the value's length; get: the
                            ///< inline limit (with `client_inline_limit`)
    uint32_t flags = 0;     ///< store/grant: the client's flags
    uint32_t reserved3 = 0;
    int64_t exptime = 0; ///< store/grant/touch: memcached's exptime; flush_all: its delay
    uint64_t arg = 0;    ///< store/grant with mode cas: the CAS unique; incr/decr: delta
};
static_assert(sizeof(request) == 40);

/// A response: this header, then `inline_len` value bytes.
struct response {
    uint8_t ver = wire::version;
    status code = status::ok;
    uint8_t is_inline = 0; ///< get: the value follows the header
    uint8_t reserved = 0;
    uint32_t id = 0;         ///< the request's id
    uint32_t flags = 0;      ///< get: the client's flags
    uint32_t inline_len = 0; ///< bytes following the header
    uint64_t version = 0;    ///< get/store/commit: the item's CAS unique (the record version)
    uint64_t addr = 0;       ///< get/store/commit: the record; grant: where the value goes
    uint32_t rkey = 0;       ///< key for `addr`
    uint32_t len = 0;        ///< get/store/commit: record bytes; grant: the value's length
    uint32_t token = 0;      ///< grant: the commit's immediate value
    uint32_t aux = 0;        ///< hello: shards; wrong_shard: the key's shard
    uint64_t number = 0;     ///< incr/decr: the new value; hello: this shard; every reply: clock
    uint32_t now = 0;        ///< the server's clock (Unix seconds) when it answered
    uint32_t reserved2 = 0;
};
static_assert(sizeof(response) == 64);

/// Reads a header from the start of a message (false when it is too short).
template <typename T>
bool parse(const char* p, size_t len, T* out) noexcept {
    if (len < sizeof(T)) {
        return false;
    }
    std::memcpy(out, p, sizeof(T));
    return true;
}

} // namespace shoal::kv::wire
