#pragma once

// Tests that need a second process (a peer to kill, a server in another engine): the test
// binary runs itself again as the peer (`--peer=MODE ADDRESS`).

#include <cstring>
#include <spawn.h>
#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

extern char** environ;

namespace shoal::testing {

/// Starts this binary again as peer `mode` talking to `address`; returns its pid.
inline pid_t spawn_peer(const std::string& mode, const std::string& address) {
    std::string self = "/proc/self/exe";
    std::string arg = "--peer=" + mode;
    char* argv[] = {self.data(), arg.data(), const_cast<char*>(address.c_str()), nullptr};
    pid_t pid = -1;
    int rc = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, environ);
    if (rc != 0) {
        throw std::runtime_error(std::string("posix_spawn: ") + std::strerror(rc));
    }
    return pid;
}

/// Waits for process `pid` to end; returns its wait status.
inline int reap(pid_t pid) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
}

/// The `main` of such a binary: `peer_main(mode, address)` when started as a peer, else the
/// GoogleTest tests.
template <typename PeerMain>
int test_or_peer_main(int argc, char** argv, PeerMain peer_main) {
    if (argc >= 3 && std::string_view(argv[1]).starts_with("--peer=")) {
        return peer_main(std::string(argv[1] + 7), std::string(argv[2]));
    }
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}

} // namespace shoal::testing
