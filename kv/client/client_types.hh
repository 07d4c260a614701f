#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shoal::kv {

/// One server's general statistics as memcached's `stats` reports them: (name, value) pairs in
/// the server's order (libmemcached's `memcached_stat`).
using server_stats = std::vector<std::pair<std::string, std::string>>;

/// The value of statistic `name` in `stats` (empty when it is not there).
inline std::string_view stat_value(const server_stats& stats, std::string_view name) noexcept {
    for (const auto& [n, v] : stats) {
        if (n == name) {
            return v;
        }
    }
    return {};
}

/// A value read by `kv::client`: its bytes, the client flags stored with it and its CAS unique
/// (for `client::cas`).
struct fetched_value {
    std::string data;   ///< the value's bytes
    uint32_t flags = 0; ///< the 32-bit client flags given when it was stored
    uint64_t cas = 0;   ///< the CAS unique of this version
};

/// Where `kv::client::get_into` left a value in the caller's registered buffer: bytes
/// [offset, offset + length), with the client flags and CAS unique stored with it.
struct placed_value {
    size_t offset = 0;  ///< where the value starts in the buffer
    size_t length = 0;  ///< the value's bytes
    uint32_t flags = 0; ///< the 32-bit client flags given when it was stored
    uint64_t cas = 0;   ///< the CAS unique of this version
};

/// What a storage command did, as memcached answers it.
enum class store_outcome {
    stored,     ///< STORED
    not_stored, ///< NOT_STORED: add of an existing key, replace/append of a missing one
    exists,     ///< EXISTS: cas of a key changed since its unique was read
    not_found,  ///< NOT_FOUND: cas of a missing key
};

/// Why a `kv::client` request failed.
enum class client_errc {
    bad_request, ///< refused before sending: bad key, client closed, no servers, an unusable
                 ///< registered buffer; or a `get_into` buffer too small for the value
    connection,  ///< connect failed, the connection broke or the server's reply made no sense
    server,      ///< the server answered ERROR, CLIENT_ERROR or SERVER_ERROR (text in what())
};

/// The exception a failed `kv::client` future holds: a kind, the index of the server concerned
/// (in the configured list; 0 for bad requests) and a message naming the server and the cause.
class client_error : public std::runtime_error {
public:
    /// An error of kind `code` about server `server`; `needed_capacity` only for a `get_into`
    /// buffer too small for the value (see `needed_capacity()`).
    client_error(client_errc code, unsigned server, const std::string& what, size_t needed_capacity = 0)
        : std::runtime_error(what)
        , _code(code)
        , _server(server)
        , _needed_capacity(needed_capacity) {}
    /// The kind of failure.
    client_errc code() const noexcept { return _code; }
    /// Index of the server concerned.
    unsigned server() const noexcept { return _server; }
    /// For a `get_into` refused because the buffer was too small (a `bad_request`): the bytes
    /// it needs for that value (the record READ over RDMA, the value where it is copied);
    /// nothing was placed. 0 for every other error.
    size_t needed_capacity() const noexcept { return _needed_capacity; }

private:
    client_errc _code;
    unsigned _server;
    size_t _needed_capacity;
};

} // namespace shoal::kv
