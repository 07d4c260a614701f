#pragma once

#include <string>
#include <vector>

namespace shoal::kv_app {

/// Rewrites memcached's short options into shoal's long ones, so `shoal-kv -p 11211 -m 64`
/// works as `memcached -p 11211 -m 64` does: -p --port, -l --listen, -m --memory,
/// -c --max-connections, -I --max-item-size, -U --udp-port, -t --threads, -v (ignored) and
/// the joined forms (-p11211). Everything else is passed through unchanged.
std::vector<std::string> translate_memcached_args(int argc, char** argv);

} // namespace shoal::kv_app
