#pragma once

#include "kv/client/server_endpoint.hh"

#include <string_view>
#include <vector>

namespace shoal::kv {

/// Parses a server list as memcached tools write it: comma-separated `host:port` or
/// `host:port:weight` entries with numeric addresses, IPv6 ones in brackets
/// (`"10.0.0.7:11211,[::1]:11212:2"`); a missing port is 11211. An entry may start with
/// `rdma://` (shoal-kv's native RDMA protocol; its port is the server's --rdma-port) or `tcp://`
/// (the default). Throws std::invalid_argument
/// naming the bad entry (empty list, empty entry, bad port or weight, unbracketed IPv6).
std::vector<server_endpoint> parse_server_list(std::string_view text);

} // namespace shoal::kv
