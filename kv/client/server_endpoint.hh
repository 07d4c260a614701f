#pragma once

#include <cstdint>
#include <string>

namespace shoal::kv {

/// How `kv::client` talks to a server.
enum class endpoint_transport {
    tcp,  ///< the memcached text protocol over TCP (any memcached server)
    rdma, ///< shoal-kv's native RDMA protocol (`port` is its --rdma-port; docs/kv.md)
};

/// One memcached-protocol server a `kv::client` spreads keys over. `host` is a numeric IPv4
/// or IPv6 address; it is also the name the ketama ring hashes, exactly as written, so write it
/// the way your libmemcached clients list the server to get the same placement.
struct server_endpoint {
    std::string host;      ///< numeric address, e.g. "10.0.0.7" or "::1"
    uint16_t port = 11211; ///< TCP port
    uint32_t weight = 1;   ///< relative share of keys (weighted ketama only); 0 counts as 1
    endpoint_transport transport = endpoint_transport::tcp; ///< the protocol to speak
};

} // namespace shoal::kv
