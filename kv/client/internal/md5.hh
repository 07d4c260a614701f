#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace shoal::kv {

/// The MD5 digest (RFC 1321) of `bytes`. Used only to place keys and servers on a ketama ring
/// the way libmemcached does (not for security).
std::array<uint8_t, 16> md5(std::string_view bytes) noexcept;

} // namespace shoal::kv
