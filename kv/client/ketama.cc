#include "kv/client/ketama.hh"

#include "kv/client/internal/md5.hh"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/core.h>

namespace shoal::kv {

namespace {

/// Four little-endian bytes of a digest starting at `4 * word`, as libmemcached reads them.
uint32_t digest_word(const std::array<uint8_t, 16>& d, unsigned word) noexcept {
    const uint8_t* p = d.data() + 4 * word;
    return uint32_t(p[3]) << 24 | uint32_t(p[2]) << 16 | uint32_t(p[1]) << 8 | p[0];
}

/// The name libmemcached hashes for point group `i` of a server: the port is left out when it
/// is memcached's default.
std::string point_name(const server_endpoint& s, unsigned i) {
    if (s.port == 11211) {
        return fmt::format("{}-{}", s.host, i);
    }
    return fmt::format("{}:{}-{}", s.host, s.port, i);
}

} // namespace

ketama_ring::ketama_ring(std::span<const server_endpoint> servers, ketama_mode mode)
    : _servers(unsigned(servers.size())) {
    if (servers.empty()) {
        throw std::invalid_argument("ketama_ring: no servers");
    }
    uint64_t total_weight = 0;
    for (const auto& s : servers) {
        total_weight += std::max<uint32_t>(s.weight, 1);
    }
    for (unsigned idx = 0; idx < servers.size(); ++idx) {
        const auto& s = servers[idx];
        if (mode == ketama_mode::plain) {
            for (unsigned i = 0; i < 100; ++i) {
                _points.emplace_back(digest_word(md5(point_name(s, i)), 0), idx);
            }
            continue;
        }
        // libmemcached computes the share in float and adds a tiny epsilon in double before
        // flooring; the same arithmetic gives the same point counts at every weight.
        float pct = float(std::max<uint32_t>(s.weight, 1)) / float(total_weight);
        float scaled = pct * 160 / 4 * float(servers.size());
        auto groups = unsigned(std::floor(double(scaled) + 0.0000000001));
        for (unsigned i = 0; i < groups; ++i) {
            auto d = md5(point_name(s, i));
            for (unsigned w = 0; w < 4; ++w) {
                _points.emplace_back(digest_word(d, w), idx);
            }
        }
    }
    // Equal points are as rare as MD5 collisions on 32 bits; libmemcached's qsort leaves their
    // order unspecified, this keeps the lower server index first.
    std::sort(_points.begin(), _points.end());
}

uint32_t ketama_ring::key_point(std::string_view key) noexcept {
    return digest_word(md5(key), 0);
}

unsigned ketama_ring::server_of(std::string_view key) const noexcept {
    if (_servers == 1) {
        return 0; // libmemcached does not hash at all with one server
    }
    uint32_t h = key_point(key);
    auto it =
        std::lower_bound(_points.begin(), _points.end(), h,
                         [](const std::pair<uint32_t, unsigned>& p, uint32_t v) { return p.first < v; });
    if (it == _points.end()) {
        it = _points.begin();
    }
    return it->second;
}

} // namespace shoal::kv
