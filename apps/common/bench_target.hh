#pragma once

#include "net/socket_address.hh"

#include <string>
#include <vector>

namespace shoal::apps {

/// A server a benchmark app measures.
struct bench_target {
    std::string name; ///< label in the tables ("shoal", "memcached", "epoll")
    net::socket_address address;
    /// The server's process id when it runs on this machine: its CPU time (user + system, from
    /// /proc) is then measured around each run. 0: not measured.
    int pid = 0;
};

/// Parses a `--targets` list: `name=host:port` or `name=host:port@pid`, separated by commas
/// (empty items skipped). Throws std::invalid_argument naming the item that is wrong: no `=`, an
/// empty name, an address socket_address::parse refuses, or a pid that is not a positive number.
std::vector<bench_target> parse_targets(const std::string& list);

} // namespace shoal::apps
