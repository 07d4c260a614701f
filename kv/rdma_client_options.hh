#pragma once

#include <cstddef>

namespace shoal::kv {

/// Settings of the native RDMA protocol in `kv::client` (`client_config::rdma`).
struct rdma_client_options {
    /// Values up to this many bytes travel inline in the store request (one round trip);
    /// larger ones are granted a slice, written with RDMA WRITE and committed.
    size_t inline_put_max = 4096;
    /// Locations (of GET and PUT replies) kept per server for direct READs; 0: no cache.
    size_t location_cache = 100000;
    /// READs of a location that fail validation before the value is fetched through the
    /// server again; after `read_retries` such rounds the GET fails.
    unsigned read_retries = 8;
};

} // namespace shoal::kv
