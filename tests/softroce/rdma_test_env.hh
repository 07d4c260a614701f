#pragma once
// Where an rdma-labelled test finds its RDMA device: the environment that tests/softroce sets up
// (rdma-test-wrapper.sh on a host with a device, run-in-guest.sh in the Soft-RoCE guest).
//   SHOAL_RDMA_DEVICE     verbs device name (rxe0 in the guest); empty: the first device
//   SHOAL_RDMA_IP         IPv4 address of the device; rdma_cm must bind and connect to it
//   SHOAL_RDMA_GID_INDEX  GID index of that address (1 in the guest: RoCEv2 ::ffff:<ip>)
//   RDMA_VM=1             set inside the Soft-RoCE guest
#include <cstdlib>
#include <string>
#include <string_view>

namespace shoal::testing {

/// The RDMA environment of an rdma-labelled test.
struct rdma_test_env {
    std::string device;    ///< empty: use the first device
    std::string ip;        ///< address to bind/connect rdma_cm ids to
    int gid_index = -1;    ///< -1: not given
    bool in_guest = false; ///< running inside the Soft-RoCE guest
    std::string error;     ///< non-empty when the environment is unusable; says why

    /// Reads SHOAL_RDMA_* (and RDMA_VM) and validates them.
    static rdma_test_env from_environment() {
        auto get = [](const char* name) {
            const char* value = std::getenv(name);
            return std::string(value ? value : "");
        };
        rdma_test_env env;
        env.device = get("SHOAL_RDMA_DEVICE");
        env.ip = get("SHOAL_RDMA_IP");
        env.in_guest = get("RDMA_VM") == "1";
        const std::string gid = get("SHOAL_RDMA_GID_INDEX");
        if (!gid.empty()) {
            char* end = nullptr;
            const long value = std::strtol(gid.c_str(), &end, 10);
            if (*end != '\0' || value < 0 || value > 65535) {
                env.error = "SHOAL_RDMA_GID_INDEX='" + gid + "' is not a GID index";
            } else {
                env.gid_index = static_cast<int>(value);
            }
        }
        if (env.ip.empty()) {
            env.error = "SHOAL_RDMA_IP is not set: run rdma tests through ctest (label rdma), "
                        "tests/softroce/run-rdma-tests.sh or tests/softroce/run-in-guest.sh";
        } else if (std::string_view(env.ip).starts_with("127.")) {
            env.error = "SHOAL_RDMA_IP=" + env.ip +
                        " is a loopback address: rdma_cm must target the RDMA device's own address "
                        "(with rxe, 127.0.0.1 fails with ENODEV)";
        }
        return env;
    }
};

} // namespace shoal::testing
