#include "apps/kv/memcached_args.hh"

#include <cerrno>
#include <cstring>
#include <map>
#include <string_view>

#include <sys/resource.h>

#include <fmt/format.h>

namespace shoal::kv_app {

std::vector<std::string> translate_memcached_args(int argc, char** argv) {
    static const std::map<char, std::string> long_of = {
        {'p', "--port"},          {'l', "--listen"},   {'m', "--memory"},  {'c', "--max-connections"},
        {'I', "--max-item-size"}, {'U', "--udp-port"}, {'t', "--threads"},
    };
    std::vector<std::string> out;
    for (int i = 0; i < argc; ++i) {
        std::string a = argv[i];
        if (i > 0 && a.size() >= 2 && a[0] == '-' && a[1] != '-') {
            if (a == "-v" || a == "-vv" || a == "-vvv") {
                continue;
            }
            // -o idle_timeout=N (memcached's extended option); other -o options are passed
            // through and refused as unknown.
            if (a == "-o" && i + 1 < argc && std::string_view(argv[i + 1]).starts_with("idle_timeout=")) {
                out.push_back("--idle-timeout");
                out.push_back(std::string(argv[++i]).substr(std::strlen("idle_timeout=")));
                continue;
            }
            auto it = long_of.find(a[1]);
            if (it != long_of.end()) {
                out.push_back(it->second);
                if (a.size() > 2) {
                    out.push_back(a.substr(2));
                }
                continue;
            }
        }
        out.push_back(a);
    }
    return out;
}

uint64_t needed_fds(const fd_needs& n) {
    // Per shard: io_uring, wake-up eventfd, timer and spare (4), the listener and its reserve (2);
    // an RDMA device adds its verbs, rdma_cm and completion channels and listeners (16).
    constexpr uint64_t per_shard = 6;
    constexpr uint64_t per_rdma_shard = 16;
    // stdio, the process's own files, connections being refused past -c or being closed.
    constexpr uint64_t margin = 64;
    // The endpoint's connections, as many again accepted and being closed to make room (its
    // backlog is its limit), its listener and reserve.
    uint64_t metrics = n.metrics_connections ? 2 * n.metrics_connections + 2 : 0;
    return uint64_t(n.max_connections) + uint64_t(n.shards) * (per_shard + (n.rdma ? per_rdma_shard : 0)) +
           metrics + margin;
}

std::string raise_fd_limit(uint64_t need, unsigned max_connections) {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        return fmt::format("failed to getrlimit number of files: {}", std::strerror(errno));
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        rlimit want = rl;
        want.rlim_cur = rlim_t(need);
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
            want.rlim_max = rlim_t(need); // only a privileged process may raise it
        }
        if (::setrlimit(RLIMIT_NOFILE, &want) != 0) {
            return fmt::format("failed to set rlimit for open files: -c {} needs {} file descriptors, the "
                               "limit is {} (hard {}). Try starting as root or requesting smaller "
                               "maxconns value.",
                               max_connections, need, rl.rlim_cur, rl.rlim_max);
        }
    }
    return {};
}

} // namespace shoal::kv_app
