#include "net/rdma/options.hh"

#include "core/app.hh"
#include "core/log.hh"
#include "net/rdma/nic_local.hh"

#include <stdexcept>

namespace shoal::net::rdma {

namespace {
logger opt_log("rdma");
}

void add_options(app& a) {
    a.add_option("rdma-device",
                 "RDMA device to use (default: the one owning --rdma-address, else the first active)");
    a.add_option("rdma-address", "local IP address whose RDMA device to use");
    a.add_option("rdma-gid-index", "GID index (default: the RoCEv2 IPv4-mapped GID)");
    a.add_option("rdma-pool-mb", "registered memory per shard, at most (MiB)", "256");
    a.add_option("rdma-recv-buffer", "size of each receive buffer (largest message a peer may send)", "64K");
    a.add_option("rdma-credits", "receive window of a connection, in messages", "16");
    a.add_flag("nic-local", "run the shards on the CPUs local to the RDMA device");
}

options options_from(const app& a) {
    options o;
    o.device.name = a.get("rdma-device");
    o.device.address = a.get("rdma-address");
    if (a.has("rdma-gid-index")) {
        uint64_t g = a.get_size("rdma-gid-index");
        if (g > 65535) {
            throw std::invalid_argument("--rdma-gid-index " + a.get("rdma-gid-index") + " is out of range");
        }
        o.device.gid_index = int(g);
    }
    uint64_t mb = a.get_size("rdma-pool-mb");
    if (mb == 0) {
        throw std::invalid_argument("--rdma-pool-mb must be at least 1");
    }
    o.pool.max_bytes = size_t(mb) << 20;
    o.pool.initial_bytes = std::min(o.pool.initial_bytes, o.pool.max_bytes);
    o.recv_buffer_size = size_t(a.get_size("rdma-recv-buffer"));
    if (o.recv_buffer_size < 64 || o.recv_buffer_size > o.pool.max_buffer) {
        throw std::invalid_argument("--rdma-recv-buffer must be between 64 and " +
                                    std::to_string(o.pool.max_buffer));
    }
    uint64_t credits = a.get_size("rdma-credits");
    if (credits < 1 || credits > 4096) {
        throw std::invalid_argument("--rdma-credits must be between 1 and 4096");
    }
    o.connection.credits = unsigned(credits);
    return o;
}

size_t receive_class_size(size_t requested, const options& o) {
    if (requested == 0) {
        return o.recv_buffer_size;
    }
    if ((requested & (requested - 1)) != 0 || requested < min_receive_class ||
        requested > o.pool.max_buffer) {
        throw std::invalid_argument("connection_options::recv_buffer_size " + std::to_string(requested) +
                                    " is not a receive size class: a power of two from " +
                                    std::to_string(min_receive_class) + " to " +
                                    std::to_string(o.pool.max_buffer) + " (0: the shard's " +
                                    std::to_string(o.recv_buffer_size) + ")");
    }
    return requested;
}

bool apply_nic_local_option(const app& a, smp_options& smp, std::string_view sysfs_root) {
    if (!a.has("nic-local")) {
        return false;
    }
    auto dev = device::open(options_from(a).device);
    auto topo = apply_nic_local(smp, dev->name(), sysfs_root);
    opt_log.info("--nic-local: {} is on NUMA node {}; shards on CPUs from {}{}", dev->name(), topo.numa_node,
                 topo.source, topo.exact ? "" : " (no locality known: all online CPUs)");
    return true;
}

} // namespace shoal::net::rdma
