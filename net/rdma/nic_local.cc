#include "net/rdma/nic_local.hh"

#include "core/smp.hh"
#include "net/rdma/error.hh"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace shoal::net::rdma {

namespace {

namespace fs = std::filesystem;

/// The whole file with surrounding whitespace removed, or nothing when it cannot be read.
std::optional<std::string> read_trimmed(const fs::path& p) {
    std::ifstream in(p);
    if (!in) {
        return std::nullopt;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    auto first = s.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) {
        return std::string();
    }
    auto last = s.find_last_not_of(" \t\r\n");
    return s.substr(first, last - first + 1);
}

std::optional<int> read_int(const fs::path& p) {
    auto s = read_trimmed(p);
    if (!s || s->empty()) {
        return std::nullopt;
    }
    try {
        size_t used = 0;
        int v = std::stoi(*s, &used);
        if (used != s->size()) {
            return std::nullopt;
        }
        return v;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

/// Fills numa_node/cpus from a bus device directory (PCI function or similar); true if it gave
/// a CPU list.
bool from_bus_device(const fs::path& dev, const fs::path& root, nic_topology& t) {
    if (auto node = read_int(dev / "numa_node")) {
        t.numa_node = *node;
    }
    if (auto list = read_trimmed(dev / "local_cpulist"); list && !list->empty()) {
        t.cpus = parse_cpu_list(*list);
        t.source = (dev / "local_cpulist").string();
        t.exact = true;
        return !t.cpus.empty();
    }
    if (t.numa_node >= 0) {
        auto node_list = root / "devices/system/node" / ("node" + std::to_string(t.numa_node)) / "cpulist";
        if (auto list = read_trimmed(node_list); list && !list->empty()) {
            t.cpus = parse_cpu_list(*list);
            t.source = node_list.string();
            t.exact = true;
            return !t.cpus.empty();
        }
    }
    return false;
}

} // namespace

std::vector<unsigned> parse_cpu_list(std::string_view text) {
    std::vector<unsigned> cpus;
    auto trimmed_end = text.find_last_not_of(" \t\r\n");
    text = trimmed_end == std::string_view::npos ? std::string_view() : text.substr(0, trimmed_end + 1);
    size_t pos = 0;
    auto number = [&]() {
        size_t start = pos;
        unsigned long v = 0;
        while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
            v = v * 10 + unsigned(text[pos] - '0');
            if (v > 65535) {
                throw std::invalid_argument("CPU list '" + std::string(text) + "': CPU number too large");
            }
            ++pos;
        }
        if (pos == start) {
            throw std::invalid_argument("CPU list '" + std::string(text) + "': expected a number at offset " +
                                        std::to_string(start));
        }
        return unsigned(v);
    };
    while (pos < text.size()) {
        unsigned first = number();
        unsigned last = first;
        if (pos < text.size() && text[pos] == '-') {
            ++pos;
            last = number();
            if (last < first) {
                throw std::invalid_argument("CPU list '" + std::string(text) + "': range goes backwards");
            }
        }
        for (unsigned c = first; c <= last; ++c) {
            cpus.push_back(c);
        }
        if (pos < text.size()) {
            if (text[pos] != ',') {
                throw std::invalid_argument("CPU list '" + std::string(text) + "': expected ',' at offset " +
                                            std::to_string(pos));
            }
            ++pos;
        }
    }
    std::sort(cpus.begin(), cpus.end());
    cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
    return cpus;
}

nic_topology read_nic_topology(std::string_view device, std::string_view sysfs_root) {
    const fs::path root(sysfs_root);
    nic_topology t;
    t.device = std::string(device);
    if (device.empty() || device.find('/') != std::string_view::npos || device == "." || device == "..") {
        throw device_error("invalid RDMA device name '" + std::string(device) + "'");
    }
    const fs::path ibdev = root / "class/infiniband" / std::string(device);
    std::error_code ec;
    if (!fs::exists(ibdev, ec)) {
        std::string known;
        for (const auto& e : fs::directory_iterator(root / "class/infiniband", ec)) {
            known += (known.empty() ? "" : ", ") + e.path().filename().string();
        }
        throw device_error("no RDMA device '" + std::string(device) + "' in " +
                           (root / "class/infiniband").string() +
                           (known.empty() ? " (it lists none)" : " (it lists: " + known + ")"));
    }
    // A hardware device: its bus device knows its node and local CPUs.
    if (fs::exists(ibdev / "device", ec) && from_bus_device(ibdev / "device", root, t)) {
        return t;
    }
    // A software device (rxe, siw): locality is that of the netdev it runs on.
    if (auto parent = read_trimmed(ibdev / "parent"); parent && !parent->empty()) {
        t.netdev = *parent;
        const fs::path netdev_dev = root / "class/net" / *parent / "device";
        if (fs::exists(netdev_dev, ec) && from_bus_device(netdev_dev, root, t)) {
            return t;
        }
    }
    // Nothing says where the device is (a virtual netdev, no NUMA): every online CPU.
    const fs::path online = root / "devices/system/cpu/online";
    if (auto list = read_trimmed(online); list && !list->empty()) {
        t.cpus = parse_cpu_list(*list);
        t.source = online.string();
    }
    t.exact = false;
    return t;
}

std::vector<unsigned> nic_local_cpus(const nic_topology& topo, const std::vector<unsigned>& allowed) {
    if (allowed.empty()) {
        return topo.cpus;
    }
    std::vector<unsigned> out;
    for (unsigned c : topo.cpus) {
        if (std::find(allowed.begin(), allowed.end(), c) != allowed.end()) {
            out.push_back(c);
        }
    }
    return out;
}

nic_topology apply_nic_local(smp_options& opts, std::string_view device, std::string_view sysfs_root) {
    nic_topology topo = read_nic_topology(device, sysfs_root);
    auto cpus = nic_local_cpus(topo, allowed_cpus());
    if (cpus.empty()) {
        throw device_error("--nic-local: none of the CPUs local to " + std::string(device) + " (from " +
                           (topo.source.empty() ? std::string("nowhere") : topo.source) +
                           ") may be used by this process");
    }
    if (opts.smp == 0) {
        opts.smp = unsigned(cpus.size());
    }
    std::vector<unsigned> set;
    for (unsigned i = 0; i < opts.smp; ++i) {
        set.push_back(cpus[i % cpus.size()]);
    }
    opts.cpuset = std::move(set);
    return topo;
}

} // namespace shoal::net::rdma
