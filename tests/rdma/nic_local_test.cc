// --nic-local: the CPU set comes from sysfs, read below a configurable root. These tests lay a
// sysfs tree out in a temporary directory (a file parser test: no verbs involved).
#include "net/rdma/error.hh"
#include "net/rdma/nic_local.hh"

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace shoal;
using namespace shoal::net::rdma;

namespace {

class fake_sysfs : public ::testing::Test {
protected:
    void SetUp() override {
        std::string tmpl = (fs::temp_directory_path() / "shoal-sysfs-XXXXXX").string();
        ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
        root = tmpl;
        write("devices/system/cpu/online", "0-7\n");
        write("devices/system/node/node0/cpulist", "0-3\n");
        write("devices/system/node/node1/cpulist", "4-7\n");
    }
    void TearDown() override { fs::remove_all(root); }
    void write(const std::string& rel, const std::string& text) {
        fs::path p = root / rel;
        fs::create_directories(p.parent_path());
        std::ofstream(p) << text;
    }
    void mkdir(const std::string& rel) { fs::create_directories(root / rel); }
    /// A PCI function with its numa_node and (optionally) local_cpulist, linked as `link`.
    void pci_device(const std::string& link, const std::string& pci, int node, const std::string& cpus) {
        write("devices/pci0000:00/" + pci + "/numa_node", std::to_string(node) + "\n");
        if (!cpus.empty()) {
            write("devices/pci0000:00/" + pci + "/local_cpulist", cpus + "\n");
        }
        fs::create_directories((root / link).parent_path());
        fs::create_directory_symlink(root / "devices/pci0000:00" / pci, root / link);
    }
    fs::path root;
};

} // namespace

TEST(cpu_list, parses_sysfs_lists) {
    EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<unsigned>{0, 1, 2, 3, 8, 10, 11}));
    EXPECT_EQ(parse_cpu_list("5"), (std::vector<unsigned>{5}));
    EXPECT_EQ(parse_cpu_list("\n"), (std::vector<unsigned>{}));
    EXPECT_EQ(parse_cpu_list("3,1-2,2"), (std::vector<unsigned>{1, 2, 3}));
    EXPECT_THROW(parse_cpu_list("1-"), std::invalid_argument);
    EXPECT_THROW(parse_cpu_list("3-1"), std::invalid_argument);
    EXPECT_THROW(parse_cpu_list("a"), std::invalid_argument);
    EXPECT_THROW(parse_cpu_list("1;2"), std::invalid_argument);
}

TEST_F(fake_sysfs, hardware_nic_uses_local_cpulist) {
    pci_device("class/infiniband/mlx5_0/device", "0000:81:00.0", 1, "4-7");
    auto t = read_nic_topology("mlx5_0", root.string());
    EXPECT_EQ(t.numa_node, 1);
    EXPECT_EQ(t.cpus, (std::vector<unsigned>{4, 5, 6, 7}));
    EXPECT_TRUE(t.exact);
    EXPECT_NE(t.source.find("local_cpulist"), std::string::npos);
}

TEST_F(fake_sysfs, numa_node_without_cpulist_uses_the_node) {
    pci_device("class/infiniband/mlx5_1/device", "0000:82:00.0", 0, "");
    auto t = read_nic_topology("mlx5_1", root.string());
    EXPECT_EQ(t.numa_node, 0);
    EXPECT_EQ(t.cpus, (std::vector<unsigned>{0, 1, 2, 3}));
    EXPECT_TRUE(t.exact);
    EXPECT_NE(t.source.find("node0/cpulist"), std::string::npos);
}

TEST_F(fake_sysfs, rxe_follows_its_parent_netdev) {
    // rxe has no `device` link; `parent` names the netdev, whose PCI device is NUMA-local.
    write("class/infiniband/rxe0/parent", "eth0\n");
    pci_device("class/net/eth0/device", "0000:03:00.0", 1, "6-7");
    auto t = read_nic_topology("rxe0", root.string());
    EXPECT_EQ(t.netdev, "eth0");
    EXPECT_EQ(t.numa_node, 1);
    EXPECT_EQ(t.cpus, (std::vector<unsigned>{6, 7}));
    EXPECT_TRUE(t.exact);
}

TEST_F(fake_sysfs, virtual_netdev_falls_back_to_all_online_cpus) {
    // The Soft-RoCE guest: rxe0 on dummy0, which has no device at all.
    write("class/infiniband/rxe0/parent", "dummy0\n");
    mkdir("class/net/dummy0");
    auto t = read_nic_topology("rxe0", root.string());
    EXPECT_EQ(t.netdev, "dummy0");
    EXPECT_EQ(t.numa_node, -1);
    EXPECT_FALSE(t.exact);
    EXPECT_EQ(t.cpus.size(), 8u);
}

TEST_F(fake_sysfs, numa_node_minus_one_without_cpulist_falls_back) {
    pci_device("class/infiniband/mlx5_2/device", "0000:83:00.0", -1, "");
    auto t = read_nic_topology("mlx5_2", root.string());
    EXPECT_FALSE(t.exact);
    EXPECT_EQ(t.cpus.size(), 8u);
}

TEST_F(fake_sysfs, missing_device_names_what_exists) {
    mkdir("class/infiniband/rxe0");
    try {
        read_nic_topology("mlx5_9", root.string());
        FAIL() << "no error";
    } catch (const device_error& e) {
        std::string m = e.what();
        EXPECT_NE(m.find("mlx5_9"), std::string::npos) << m;
        EXPECT_NE(m.find("rxe0"), std::string::npos) << m;
    }
    EXPECT_THROW(read_nic_topology("../etc", root.string()), device_error);
}

TEST_F(fake_sysfs, apply_sets_one_cpu_per_shard_and_shares_when_short) {
    // Use only CPUs this process may run on, so the intersection with the affinity is stable.
    unsigned cpu = unsigned(sched_getcpu());
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
    std::vector<unsigned> mine;
    for (unsigned c = 0; c < 8; ++c) {
        if (CPU_ISSET(c, &set)) {
            mine.push_back(c);
        }
    }
    ASSERT_FALSE(mine.empty());
    (void)cpu;
    std::string list;
    for (unsigned c : mine) {
        list += (list.empty() ? "" : ",") + std::to_string(c);
    }
    pci_device("class/infiniband/mlx5_3/device", "0000:84:00.0", 0, list);
    smp_options o;
    o.smp = 0;
    auto t = apply_nic_local(o, "mlx5_3", root.string());
    EXPECT_EQ(o.smp, mine.size());
    EXPECT_EQ(o.cpuset, mine);
    smp_options more;
    more.smp = unsigned(mine.size()) + 2;
    apply_nic_local(more, "mlx5_3", root.string());
    ASSERT_EQ(more.cpuset.size(), more.smp);
    EXPECT_EQ(more.cpuset[mine.size()], mine[0]);
}

TEST_F(fake_sysfs, apply_fails_when_no_local_cpu_is_allowed) {
    pci_device("class/infiniband/mlx5_4/device", "0000:85:00.0", 0, "4000-4001");
    smp_options o;
    EXPECT_THROW(apply_nic_local(o, "mlx5_4", root.string()), device_error);
}
