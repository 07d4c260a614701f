#pragma once

#include "kv/client/server_endpoint.hh"

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace shoal::kv {

/// Which of libmemcached's consistent-hashing set-ups a ring reproduces (both with MD5).
enum class ketama_mode {
    /// MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED: 160 points per server scaled by weight, four points
    /// per MD5 digest of "host[:port]-i".
    weighted,
    /// MEMCACHED_BEHAVIOR_KETAMA with MEMCACHED_BEHAVIOR_HASH = MD5: 100 points per server,
    /// one per digest (the first four bytes).
    plain,
};

/// A ketama continuum over a list of servers: the server index a key lands on is the one a
/// libmemcached client configured the same way (same servers, same order, same mode) chooses.
/// Built once; lookups allocate nothing.
class ketama_ring {
public:
    /// The ring of `servers` (at least one) in `mode`.
    ketama_ring(std::span<const server_endpoint> servers, ketama_mode mode);

    /// Index into the server list of the server that owns `key`.
    unsigned server_of(std::string_view key) const noexcept;
    /// The 32-bit point of `key` on the ring (libmemcached's MD5 key hash).
    static uint32_t key_point(std::string_view key) noexcept;
    /// Points on the ring.
    size_t points() const noexcept { return _points.size(); }

private:
    std::vector<std::pair<uint32_t, unsigned>> _points; ///< (point, server index), sorted
    unsigned _servers;
};

} // namespace shoal::kv
