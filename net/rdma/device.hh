#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

// <infiniband/verbs.h> is included only by the .cc files that call verbs.
struct ibv_context;
struct ibv_device_attr_ex;
struct ibv_port_attr;
union ibv_gid;

namespace shoal::net::rdma {

namespace internal {
/// The verbs attributes of a device (defined in device.cc, where their types are complete).
struct device_attributes;
} // namespace internal

/// How to choose the RDMA device (command line: `--rdma-device`, `--rdma-address`,
/// `--rdma-gid-index`).
struct device_options {
    /// The verbs device name (e.g. "mlx5_0", "rxe0"); empty: chosen by `address`, else the
    /// first device with an active port.
    std::string name;
    /// A local IP address: the device that owns it (rdma_cm binds the address to find it).
    std::string address;
    /// The GID index to use; -1 picks one: the RoCEv2 IPv4-mapped GID (matching `address` when
    /// given) on Ethernet, index 0 on InfiniBand.
    int gid_index = -1;
};

/// What the device and its provider can do, probed once when the device is opened.
struct device_capabilities {
    /// `ibv_alloc_td` + `ibv_alloc_parent_domain` work: per-shard PDs avoid provider locks.
    bool thread_domain = false;
    /// errno of the failed thread/parent domain allocation (EOPNOTSUPP on rxe), else 0.
    int thread_domain_errno = 0;
    /// Largest inline send a QP accepts (probed by creating QPs).
    uint32_t max_inline_data = 0;
    /// Scatter-gather entries a send work request may have (`ibv_device_attr::max_sge`).
    uint32_t max_send_sge = 1;
    /// Remote atomics (fetch-and-add, compare-and-swap) are supported.
    bool atomics = false;
    /// Memory windows of type 2 are supported.
    bool memory_windows = false;
};

/// An opened RDMA device with its chosen port and GID. Shared by every shard (the verbs context
/// is thread-safe); each shard builds its own resources on it. The verbs context is librdmacm's,
/// so QPs of rdma_cm ids and the shards' protection domains agree.
class device {
public:
    /// Finds and opens the device `opts` asks for. Throws device_error with a message that names
    /// what was looked for and what exists (also when the host has no RDMA device at all).
    static std::shared_ptr<const device> open(const device_options& opts = {});

    /// The verbs context (librdmacm's, not owned).
    ibv_context* context() const noexcept { return _ctx; }
    /// The verbs device name.
    const std::string& name() const noexcept { return _name; }
    /// The port in use (an active one).
    uint8_t port() const noexcept { return _port; }
    /// Index of the chosen GID in the port's GID table.
    int gid_index() const noexcept { return _gid_index; }
    /// The chosen GID.
    const ibv_gid& gid() const noexcept;
    /// The GID as text ("::ffff:10.10.0.1" or "fe80::...").
    std::string gid_text() const;
    /// The GID's type: "RoCEv2", "RoCEv1" or "IB".
    const std::string& gid_type() const noexcept { return _gid_type; }
    /// The IPv4 address of an IPv4-mapped GID (or the address the device was chosen by), else
    /// empty. rdma_cm binds and connects with this address.
    const std::string& ipv4_address() const noexcept { return _ipv4; }
    /// "Ethernet" or "InfiniBand".
    std::string link_layer() const;
    /// The device's attributes (ibv_query_device_ex).
    const ibv_device_attr_ex& attributes() const noexcept;
    /// The attributes of the port in use.
    const ibv_port_attr& port_attributes() const noexcept;
    /// What the device and provider support, probed at `open`.
    const device_capabilities& capabilities() const noexcept { return _caps; }
    /// One line for logs: name, port, link layer, MTU, GID, inline limit and thread domain
    /// ("rxe0 port 1 (Ethernet, MTU 1024), GID[1] ::ffff:10.10.0.1 (RoCEv2), ...").
    std::string describe() const;

    device(const device&) = delete;
    device& operator=(const device&) = delete;
    ~device();

private:
    device();
    void choose_gid(int requested, const std::string& address);
    void probe_capabilities();

    ibv_context* _ctx = nullptr;
    std::string _name;
    uint8_t _port = 1;
    int _gid_index = 0;
    std::string _gid_type;
    std::string _ipv4;
    std::unique_ptr<internal::device_attributes> _v; // the GID, device and port attributes
    device_capabilities _caps;
};

/// Names of the RDMA devices librdmacm can use (empty when there are none).
std::vector<std::string> device_names();

} // namespace shoal::net::rdma
