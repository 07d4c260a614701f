#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shoal::kv_app {

/// Rewrites memcached's short options into shoal's long ones, so `shoal-kv -p 11211 -m 64`
/// works as `memcached -p 11211 -m 64` does: -p --port, -l --listen, -m --memory,
/// -c --max-connections, -I --max-item-size, -U --udp-port, -t --threads, -v (ignored) and
/// the joined forms (-p11211), and `-o idle_timeout=N` (--idle-timeout N). Everything else is
/// passed through unchanged.
std::vector<std::string> translate_memcached_args(int argc, char** argv);

/// What `shoal-kv` needs file descriptors for, besides its clients.
struct fd_needs {
    unsigned max_connections = 1024; ///< -c
    unsigned shards = 1;             ///< --smp
    size_t metrics_connections = 0;  ///< the Prometheus endpoint's limit (0: off)
    bool rdma = false;               ///< --rdma-port given
};

/// The RLIMIT_NOFILE `shoal-kv` needs: the -c clients, per shard its ring, wake-up and timer
/// descriptors, its listener and the listener's reserve descriptor (and the RDMA device's when
/// on), the Prometheus endpoint's connections, and a margin for connections being refused or
/// closed and for the process's own files.
uint64_t needed_fds(const fd_needs& n);

/// Raises the soft RLIMIT_NOFILE to `need` (never lowers it; up to the hard limit). Returns an
/// empty string when the limit is now at least `need`, else memcached's complaint with the
/// numbers ("failed to set rlimit for open files. Try starting as root or requesting smaller
/// maxconns value.").
std::string raise_fd_limit(uint64_t need, unsigned max_connections);

} // namespace shoal::kv_app
