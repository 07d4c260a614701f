#pragma once

#include "core/smp.hh"

#include <string>
#include <string_view>
#include <vector>

namespace shoal::net::rdma {

/// Where an RDMA device sits: its NUMA node and the CPUs close to it, as sysfs describes them.
struct nic_topology {
    std::string device;         ///< the verbs device name (e.g. mlx5_0, rxe0)
    std::string netdev;         ///< the parent network device of a software device (rxe, siw)
    int numa_node = -1;         ///< -1 when sysfs gives none
    std::vector<unsigned> cpus; ///< the CPUs local to the device, ascending
    std::string source;         ///< the sysfs file the CPU list came from
    bool exact = false;         ///< false when no locality is known and `cpus` is every online CPU
};

/// Reads the topology of `device` below `sysfs_root` (normally "/sys"; tests point it at a tree
/// laid out in a temporary directory). Looks at class/infiniband/<dev>/device/{numa_node,
/// local_cpulist}; for software devices without a `device` link (rxe, siw) at the `parent`
/// netdev's class/net/<netdev>/device; then at the node's devices/system/node/node<N>/cpulist;
/// and, when nothing says where the device is, at devices/system/cpu/online (`exact` false).
/// Throws device_error naming the path when the device does not exist there.
nic_topology read_nic_topology(std::string_view device, std::string_view sysfs_root = "/sys");

/// Parses a sysfs CPU list ("0-3,8,10-11", trailing newline allowed; empty means none).
/// Throws std::invalid_argument on bad syntax.
std::vector<unsigned> parse_cpu_list(std::string_view text);

/// The CPUs of `topo` that are also in `allowed` (all of `topo.cpus` when `allowed` is empty).
std::vector<unsigned> nic_local_cpus(const nic_topology& topo, const std::vector<unsigned>& allowed = {});

/// Sets `opts.cpuset` to the CPUs local to `device` (intersected with the CPUs the process may
/// use) and, when `opts.smp` is 0, one shard per such CPU. With more shards than local CPUs the
/// shards share them. Returns the topology used. Throws device_error when the device is missing
/// or none of its CPUs may be used.
nic_topology apply_nic_local(smp_options& opts, std::string_view device,
                             std::string_view sysfs_root = "/sys");

} // namespace shoal::net::rdma
