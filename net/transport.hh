#pragma once

#include "core/future.hh"
#include "net/socket_address.hh"
#include "net/stream.hh"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace shoal {
class app;
}

namespace shoal::net {

/// How an application reaches the network, chosen at run time (`--transport tcp|rdma`): the
/// listen and connect functions of one transport, plus what it must do once the engine runs and
/// before it stops. Servers and clients written against it only see `server_socket` and
/// `connected_socket`, so one implementation serves both transports.
struct transport {
    std::string name;
    std::function<server_socket(const socket_address&, const listen_options&)> listen;
    std::function<future<connected_socket>(const socket_address&)> connect;
    /// `connect` that the abort_source cancels: aborted before the connection is up, the future
    /// fails at once with the abort's reason and what the attempt made is freed.
    std::function<future<connected_socket>(const socket_address&, abort_source&)> connect_abortable;
    /// Runs on shard 0 once the engine runs, before any listen or connect (RDMA opens its
    /// device and builds every shard's resources here).
    std::function<future<>()> start = [] { return make_ready_future<>(); };
    /// Runs on shard 0 after the last connection is gone.
    std::function<future<>()> stop = [] { return make_ready_future<>(); };
};

/// Declares the command-line options of every transport on `a` (RDMA's --rdma-*).
void add_transport_options(app& a);

/// The transport called `name` ("tcp" or "rdma") with default settings. Throws
/// std::invalid_argument naming the known ones.
transport make_transport(std::string_view name);
/// The same, configured from `a`'s parsed options (declared by `add_transport_options`).
/// Also throws std::invalid_argument for a bad option value.
transport make_transport(std::string_view name, const app& a);

/// Names `make_transport` accepts.
std::vector<std::string> transport_names();

} // namespace shoal::net
