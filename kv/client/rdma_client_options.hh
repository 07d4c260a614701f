#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace shoal::kv {

/// Settings of the native RDMA protocol in `kv::client` (`client_config::rdma`).
struct rdma_client_options {
    /// Values up to this many bytes travel inline in the store request (one round trip);
    /// larger ones (and any that do not fit one message) are granted a slice, written with RDMA
    /// WRITE and committed. 64 KB, in effect whatever fits a message: inline was faster at every
    /// size measured that fits, up to 48 KB (bench/kv_inline_sweep.sh; docs/performance-history.md,
    /// "Inline thresholds, measured").
    size_t inline_put_max = 65536;
    /// GET replies carry values up to this many bytes inline (larger ones: a location the client
    /// READs); unset: the server's `rdma_server_config::inline_get_max`. Either way a value
    /// inline must fit one message.
    std::optional<uint32_t> inline_get_max;
    /// Locations (of GET and PUT replies) kept per server for direct READs; 0: no cache. The
    /// table grows with use to twice this many 64-byte slots at most (100,000: 16 MiB).
    size_t location_cache = 100000;
    /// READs of a location that fail validation before the value is fetched through the
    /// server again; after `read_retries` such rounds the GET fails.
    unsigned read_retries = 8;
    /// How long a request may wait for its reply (0: no limit; `kv::client` passes its
    /// `request_timeout` when this is 0). A request past it fails with a `connection` error and
    /// breaks its shard connection (every request in flight on it fails the same way); the next
    /// request connects again.
    std::chrono::milliseconds request_timeout{0};
    /// Reconnect back-off: a connection that broke is made again on the next request; when that
    /// attempt fails, requests fail at once (no attempt) for `reconnect_backoff_min`, doubled
    /// after every further failed attempt up to `reconnect_backoff_max`; a success resets it.
    std::chrono::milliseconds reconnect_backoff_min{100};
    std::chrono::milliseconds reconnect_backoff_max{5000};
    /// Time each GET served by a cached location (three clock reads; `rdma_client_stats`'
    /// `timed_*`): where its latency goes. Off: no clock read.
    bool time_cached_gets = false;
};

} // namespace shoal::kv
