#pragma once

#include "core/future.hh"
#include "kv/client/client_types.hh"
#include "net/rdma/memory_region.hh"

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shoal::kv::internal {

/// The storage commands a transport carries.
enum class store_op { set, add, replace, cas, append, prepend };

/// Copies `value` to the start of `dst` (a `get_into` answered by copying): where it lies, or
/// nullopt when `dst` is too small for it.
inline std::optional<placed_value> copy_into(const net::rdma::local_span& dst, std::string_view value,
                                             uint32_t flags, uint64_t cas) noexcept {
    if (value.size() > dst.length) {
        return std::nullopt;
    }
    if (!value.empty()) {
        std::memcpy(dst.addr, value.data(), value.size());
    }
    return placed_value{0, value.size(), flags, cas};
}

/// Adds the statistic of a `STAT name value` line (memcached's `stats`) to `out`; false when
/// `line` is not one.
inline bool parse_stat_line(std::string_view line, server_stats& out) {
    if (!line.starts_with("STAT ")) {
        return false;
    }
    line.remove_prefix(5);
    size_t space = line.find(' ');
    if (space == 0 || space == std::string_view::npos) {
        return false;
    }
    out.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
    return true;
}

/// The statistics of a whole `stats` answer (`STAT` lines ending in CRLF, then END); nullopt
/// when it is anything else.
inline std::optional<server_stats> parse_stats_text(std::string_view text) {
    server_stats out;
    for (;;) {
        size_t end = text.find("\r\n");
        if (end == std::string_view::npos) {
            return std::nullopt;
        }
        std::string_view line = text.substr(0, end);
        text.remove_prefix(end + 2);
        if (line == "END") {
            return text.empty() ? std::optional(std::move(out)) : std::nullopt;
        }
        if (!parse_stat_line(line, out)) {
            return std::nullopt;
        }
    }
}

/// How `kv::client` talks to one server: the memcached text protocol over TCP today
/// (`text_transport`), the native RDMA protocol later. Requests may be issued without waiting
/// for earlier ones; a transport pipelines them and resolves each future with its own reply.
/// Keys and values are read during the call only (registered spans: until the future resolves).
/// Failures are `client_error`s. Single-shard.
class client_transport {
public:
    virtual ~client_transport() = default;
    /// The values of `keys` (nullopt where missing), in the order of `keys`.
    virtual future<std::vector<std::optional<fetched_value>>> get(std::vector<std::string> keys) = 0;
    /// The value of one key (nullopt when missing): `get` of that key unless the transport has a
    /// cheaper path (the RDMA transport's cached GET: no key vector, no future per key).
    virtual future<std::optional<fetched_value>> get_one(std::string_view key) {
        std::vector<std::string> keys;
        keys.emplace_back(key);
        return get(std::move(keys)).then([](std::vector<std::optional<fetched_value>> v) {
            return std::move(v.front());
        });
    }
    /// A storage command (`cas_unique` only for `store_op::cas`).
    virtual future<store_outcome> store(store_op op, std::string_view key, std::string_view value,
                                        uint32_t flags, int64_t exptime, uint64_t cas_unique) = 0;
    /// A storage command whose value is the registered memory `src` (`kv::client::set_from`): the
    /// RDMA transport WRITEs a granted value straight from it, others copy it. The span holds its
    /// pool buffer until the future resolves.
    virtual future<store_outcome> store_from(store_op op, std::string_view key, net::rdma::local_span src,
                                             uint32_t flags, int64_t exptime, uint64_t cas_unique) = 0;
    /// The value of `key` placed in the registered memory `dst` (`kv::client::get_into`), nullopt
    /// when missing; a `bad_request` error when `dst` is too small. The RDMA transport READs the
    /// record into `dst` and validates it there (the value follows the record's header), others
    /// copy the value to its start. The span holds its pool buffer until the future resolves.
    virtual future<std::optional<placed_value>> get_into(std::string_view key, net::rdma::local_span dst) = 0;
    /// Deletes `key`: true when it existed.
    virtual future<bool> remove(std::string_view key) = 0;
    /// incr (`incr` true) or decr by `delta`: the new value, nullopt when the key is missing.
    virtual future<std::optional<uint64_t>> delta(bool incr, std::string_view key, uint64_t delta) = 0;
    /// Gives `key` a new exptime (memcached's rules): true when it existed.
    virtual future<bool> touch(std::string_view key, int64_t exptime) = 0;
    /// memcached's gats: the value of `key` (nullopt when missing), which gets `exptime` as it is
    /// fetched, in one request.
    virtual future<std::optional<fetched_value>> gat(std::string_view key, int64_t exptime) = 0;
    /// memcached's general `stats` of the server.
    virtual future<server_stats> server_statistics() = 0;
    /// memcached's flush_all on the whole server: every item stored before now (`delay` 0) or
    /// before `delay` (an exptime) becomes invisible then.
    virtual future<> flush_all(int64_t delay) = 0;
    /// Lets requests in flight finish, then closes the connection; later requests fail.
    virtual future<> close() = 0;
};

} // namespace shoal::kv::internal
