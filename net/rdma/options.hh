#pragma once

#include "net/rdma/device.hh"
#include "net/rdma/memory_pool.hh"
#include "net/rdma/memory_region.hh"

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace shoal {
class app;
struct smp_options;
} // namespace shoal

namespace shoal::net::rdma {

/// Per-connection settings (defaults in `options::connection`, overridable per connect/listen).
struct connection_options {
    /// Send work requests a connection may have outstanding (its send queue depth, >= 8).
    unsigned send_queue_depth = 128;
    /// Largest receive window: messages the peer may send before this side returns credits.
    unsigned credits = 16;
    /// Receive window of a connection whose peer is not sending (and its first window), at most
    /// `credits`. Below `credits` the window opens (doubling) while the peer runs low on credits
    /// and closes back (halving) after a window of messages where it did not; an idle connection
    /// pins `idle_credits + ctrl_credits` shared receives (docs/rdma.md, "Limits and scale").
    unsigned idle_credits = 2;
    /// Receives reserved for the peer's credit-only messages.
    unsigned ctrl_credits = 2;
    /// The connection's receive size class: the size of each receive buffer it promises the
    /// peer, hence the largest message the peer may send (stream writes are split to it, a
    /// message connection's messages are bounded by it). 0: the shard's
    /// `options::recv_buffer_size`. Otherwise a power of two from `min_receive_class` to the
    /// pool's largest buffer; a shard keeps one shared receive queue per class in use, at most
    /// `max_receive_classes` (docs/rdma.md, "Limits and scale"). An idle connection pins
    /// `(idle_credits + ctrl_credits) × recv_buffer_size` of registered memory.
    size_t recv_buffer_size = 0;
    /// A connection that sent nothing for this long (between one and two of it) while holding
    /// more of the peer's credits than the peer's idle window hands the rest back, so a peer
    /// that bursts and goes quiet does not keep the receiver's buffers pinned. 0: never.
    std::chrono::milliseconds give_back_after{1000};
    /// Every k-th send is signaled (others are unsignaled and retired by the next signaled).
    unsigned signal_every = 16;
    /// Bytes a stream may queue before `put` waits (back-pressure towards the writer).
    size_t send_buffer_limit = size_t(1) << 20;
    /// A region offered to the peer in the connect/accept private data.
    std::optional<remote_region> region;
    /// Source address of an outgoing connection (empty: the device's address).
    std::string local_address;
    /// Time allowed for address and for route resolution (each).
    std::chrono::milliseconds resolve_timeout{2000};
    /// Time allowed for the whole connection setup.
    std::chrono::milliseconds connect_timeout{10000};
    /// At teardown, how long to wait for IBV_EVENT_QP_LAST_WQE_REACHED (the device is done with
    /// the QP's shared receives) before draining the CQ and destroying the QP anyway.
    std::chrono::milliseconds last_wqe_timeout{50};
};

/// Everything `rdma::start` needs.
struct options {
    device_options device;
    pool_options pool;
    /// Size of every receive buffer of a shard's default receive class (connections whose
    /// `connection_options::recv_buffer_size` is 0): the largest message such a peer may send
    /// to this side. Stream writes are split into pieces of at most the peer's size.
    size_t recv_buffer_size = size_t(64) << 10;
    /// Receives a shard's SRQs hold at most, all size classes together (bounds credits over all
    /// its connections; every CQ keeps this many entries for receives).
    unsigned srq_size = 8192;
    /// Receives kept posted beyond those promised to peers, in each size class's SRQ (at most
    /// half of `srq_size`; a 4 KiB class's slack costs 512 KiB at 128): a peer that sends
    /// without credits consumes receives promised to others until its first message is polled
    /// and it is disconnected. A shoal peer has at most its send queue depth in
    /// flight, so the default covers one such peer; the SRQ limit event refills the slack when
    /// half of it is gone.
    unsigned srq_slack = 128;
    /// CQ entries of a shard's first CQ beside the `srq_size` every CQ keeps for receives; each
    /// connection reserves its send queue depth, CQs grow up to the device's `max_cqe` and when
    /// none can, another CQ is made (rxe caps a CQ at 32,767 entries).
    unsigned cq_size = 4096;
    /// Connections (accepted and connecting) a shard holds at most; beyond it connects fail
    /// and connect requests are rejected with "connection limit of N reached on shard S".
    unsigned max_connections = 4096;
    /// Completions taken per ibv_poll_cq.
    unsigned cq_batch = 32;
    /// Defaults of connect/listen.
    connection_options connection;
};

/// Smallest receive size class a connection may ask for (`connection_options::recv_buffer_size`).
inline constexpr size_t min_receive_class = 256;
/// Receive size classes (shared receive queues) a shard holds at most, its default one included.
inline constexpr unsigned max_receive_classes = 4;

/// The receive buffer size a connection with `requested` (`connection_options::recv_buffer_size`)
/// uses on a shard started with `o`: `o.recv_buffer_size` for 0, else `requested`. Throws
/// std::invalid_argument naming the value when it is not a power of two from
/// `min_receive_class` to `o.pool.max_buffer`.
size_t receive_class_size(size_t requested, const options& o);

/// Declares the RDMA command-line options on `a`: --rdma-device, --rdma-address,
/// --rdma-gid-index, --rdma-pool-mb, --rdma-recv-buffer, --rdma-credits, --nic-local.
void add_options(app& a);
/// Reads the options declared by `add_options` (after `a.parse`). Throws std::invalid_argument.
options options_from(const app& a);
/// With --nic-local: opens the chosen device, then sets `smp`'s cpuset to the CPUs local to it
/// (see nic_local.hh). Returns whether it changed anything. Throws device_error.
bool apply_nic_local_option(const app& a, smp_options& smp, std::string_view sysfs_root = "/sys");

} // namespace shoal::net::rdma
