#include "net/rdma/device.hh"

#include "net/rdma/error.hh"
#include "net/socket_address.hh"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <initializer_list>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

namespace shoal::net::rdma {

namespace {

/// The contexts librdmacm opened, one per device (never closed: librdmacm owns them).
std::vector<ibv_context*> cm_contexts(int& err) {
    int n = 0;
    errno = 0;
    ibv_context** list = rdma_get_devices(&n);
    err = errno;
    std::vector<ibv_context*> out;
    if (list) {
        out.assign(list, list + n);
        rdma_free_devices(list);
    }
    return out;
}

std::string what_was_wanted(const device_options& opts) {
    if (!opts.name.empty()) {
        return "device '" + opts.name + "' (--rdma-device)";
    }
    if (!opts.address.empty()) {
        return "the device owning address " + opts.address + " (--rdma-address)";
    }
    return "any device";
}

std::string sysfs_listing() {
    std::error_code ec;
    std::string names;
    for (const auto& e : std::filesystem::directory_iterator("/sys/class/infiniband", ec)) {
        names += (names.empty() ? "" : ", ") + e.path().filename().string();
    }
    if (ec && names.empty()) {
        return "/sys/class/infiniband does not exist";
    }
    return names.empty() ? "/sys/class/infiniband is empty" : "/sys/class/infiniband lists " + names;
}

std::string no_device_text(const device_options& opts, int err) {
    std::error_code ec;
    bool devdir = std::filesystem::exists("/dev/infiniband", ec);
    return fmt::format("no RDMA device: looked for {}, but librdmacm finds none{} ({}; /dev/infiniband {}). "
                       "Load an RDMA driver (for Soft-RoCE: modprobe rdma_rxe && rdma link add rxe0 type rxe "
                       "netdev <if>) or use the TCP transport, which works without RDMA.",
                       what_was_wanted(opts), err ? fmt::format(" ({})", std::strerror(err)) : std::string(),
                       sysfs_listing(), devdir ? "exists" : "is missing");
}

bool ipv4_mapped(const ibv_gid& g) {
    for (int i = 0; i < 10; ++i) {
        if (g.raw[i] != 0) {
            return false;
        }
    }
    return g.raw[10] == 0xff && g.raw[11] == 0xff;
}

std::string ipv4_of(const ibv_gid& g) {
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, g.raw + 12, text, sizeof(text));
    return text;
}

std::string gid_string(const ibv_gid& g) {
    char text[INET6_ADDRSTRLEN] = {};
    inet_ntop(AF_INET6, g.raw, text, sizeof(text));
    return text;
}

std::string type_name(uint32_t t) {
    switch (t) {
    case IBV_GID_TYPE_ROCE_V2:
        return "RoCEv2";
    case IBV_GID_TYPE_ROCE_V1:
        return "RoCEv1";
    default:
        return "IB";
    }
}

} // namespace

struct internal::device_attributes {
    ibv_gid gid{};
    ibv_device_attr_ex attr{};
    ibv_port_attr port_attr{};
};

device::device()
    : _v(std::make_unique<internal::device_attributes>()) {}

device::~device() = default;

const ibv_gid& device::gid() const noexcept {
    return _v->gid;
}

const ibv_device_attr_ex& device::attributes() const noexcept {
    return _v->attr;
}

const ibv_port_attr& device::port_attributes() const noexcept {
    return _v->port_attr;
}

std::vector<std::string> device_names() {
    int err = 0;
    std::vector<std::string> names;
    for (ibv_context* c : cm_contexts(err)) {
        names.emplace_back(ibv_get_device_name(c->device));
    }
    return names;
}

std::shared_ptr<const device> device::open(const device_options& opts) {
    int err = 0;
    auto ctxs = cm_contexts(err);
    if (ctxs.empty()) {
        throw device_error(no_device_text(opts, err));
    }
    std::string available;
    for (ibv_context* c : ctxs) {
        available += (available.empty() ? "" : ", ") + std::string(ibv_get_device_name(c->device));
    }

    std::shared_ptr<device> d(new device());
    int port_from_cm = 0;
    if (!opts.address.empty()) {
        net::socket_address sa;
        try {
            sa = net::socket_address::parse(opts.address, 0);
        } catch (const std::exception& e) {
            throw device_error("--rdma-address: " + std::string(e.what()));
        }
        rdma_cm_id* id = nullptr;
        if (rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP) != 0) {
            throw device_error(internal::errno_text("rdma_create_id", errno));
        }
        int rc = rdma_bind_addr(id, sa.as_sockaddr());
        int bind_err = errno;
        ibv_context* verbs = rc == 0 ? id->verbs : nullptr;
        port_from_cm = rc == 0 ? id->port_num : 0;
        rdma_destroy_id(id);
        if (rc != 0) {
            throw device_error(fmt::format("no RDMA device owns address {}: rdma_bind_addr failed: {} "
                                           "(devices: {})",
                                           opts.address, std::strerror(bind_err), available));
        }
        if (!verbs) {
            throw device_error(
                fmt::format("address {} is on no RDMA device (devices: {})", opts.address, available));
        }
        d->_ctx = verbs;
    }
    if (!opts.name.empty()) {
        ibv_context* named = nullptr;
        for (ibv_context* c : ctxs) {
            if (opts.name == ibv_get_device_name(c->device)) {
                named = c;
            }
        }
        if (!named) {
            throw device_error(fmt::format("RDMA device '{}' (--rdma-device) not found; available: {}",
                                           opts.name, available));
        }
        if (d->_ctx && d->_ctx != named) {
            throw device_error(fmt::format("address {} belongs to {}, not to --rdma-device {}", opts.address,
                                           ibv_get_device_name(d->_ctx->device), opts.name));
        }
        d->_ctx = named;
    }

    // Without a name or an address: the first device with an active port.
    auto first_active_port = [](ibv_context* c) -> int {
        ibv_device_attr a{};
        if (ibv_query_device(c, &a) != 0) {
            return 0;
        }
        for (int p = 1; p <= a.phys_port_cnt; ++p) {
            ibv_port_attr pa{};
            if (ibv_query_port(c, uint8_t(p), &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
                return p;
            }
        }
        return 0;
    };
    if (!d->_ctx) {
        for (ibv_context* c : ctxs) {
            if (first_active_port(c) > 0) {
                d->_ctx = c;
                break;
            }
        }
        if (!d->_ctx) {
            throw device_error("no RDMA device has an active port (devices: " + available + ")");
        }
    }
    d->_name = ibv_get_device_name(d->_ctx->device);
    if (ibv_query_device_ex(d->_ctx, nullptr, &d->_v->attr) != 0) {
        throw device_error(internal::errno_text("ibv_query_device_ex(" + d->_name + ")", errno));
    }
    int port = port_from_cm > 0 ? port_from_cm : first_active_port(d->_ctx);
    if (port <= 0) {
        throw device_error("RDMA device " + d->_name + " has no active port");
    }
    d->_port = uint8_t(port);
    if (ibv_query_port(d->_ctx, d->_port, &d->_v->port_attr) != 0) {
        throw device_error(
            internal::errno_text(fmt::format("ibv_query_port({} port {})", d->_name, port), errno));
    }
    if (d->_v->port_attr.state != IBV_PORT_ACTIVE) {
        throw device_error(fmt::format("port {} of RDMA device {} is not active", port, d->_name));
    }
    d->choose_gid(opts.gid_index, opts.address);
    if (d->_ipv4.empty() && !opts.address.empty()) {
        d->_ipv4 = opts.address;
    }
    d->probe_capabilities();
    return d;
}

void device::choose_gid(int requested, const std::string& address) {
    size_t max = size_t(_v->attr.orig_attr.phys_port_cnt) * std::max(1, _v->port_attr.gid_tbl_len);
    std::vector<ibv_gid_entry> all(max);
    ssize_t got = ibv_query_gid_table(_ctx, all.data(), all.size(), 0);
    if (got < 0) {
        throw device_error(internal::errno_text("ibv_query_gid_table(" + _name + ")", int(-got)));
    }
    std::vector<ibv_gid_entry> entries;
    for (ssize_t i = 0; i < got; ++i) {
        if (all[size_t(i)].port_num == _port) {
            entries.push_back(all[size_t(i)]);
        }
    }
    auto listing = [&] {
        std::string s;
        for (const auto& e : entries) {
            s += fmt::format("{}[{}] {} {}", s.empty() ? "" : ", ", e.gid_index, gid_string(e.gid),
                             type_name(e.gid_type));
        }
        return s.empty() ? std::string("none") : s;
    };
    const ibv_gid_entry* chosen = nullptr;
    if (requested >= 0) {
        for (const auto& e : entries) {
            if (int(e.gid_index) == requested) {
                chosen = &e;
            }
        }
        if (!chosen) {
            throw device_error(
                fmt::format("GID index {} (--rdma-gid-index) is not valid on {} port {}; valid GIDs: {}",
                            requested, _name, _port, listing()));
        }
    } else if (_v->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET) {
        for (const auto& e : entries) {
            if (e.gid_type != IBV_GID_TYPE_ROCE_V2 || !ipv4_mapped(e.gid)) {
                continue;
            }
            if (!address.empty() && ipv4_of(e.gid) == address) {
                chosen = &e;
                break;
            }
            if (!chosen) {
                chosen = &e;
            }
        }
        if (!chosen) {
            throw device_error(
                fmt::format("no RoCEv2 GID with an IPv4 address on {} port {} (GIDs: {}); give its "
                            "network interface an IPv4 address or choose one with --rdma-gid-index",
                            _name, _port, listing()));
        }
    } else {
        for (const auto& e : entries) {
            if (!chosen || e.gid_index < chosen->gid_index) {
                chosen = &e;
            }
        }
        if (!chosen) {
            throw device_error(fmt::format("{} port {} has no GID", _name, _port));
        }
    }
    _gid_index = int(chosen->gid_index);
    _v->gid = chosen->gid;
    _gid_type = type_name(chosen->gid_type);
    if (ipv4_mapped(_v->gid)) {
        _ipv4 = ipv4_of(_v->gid);
    }
}

void device::probe_capabilities() {
    _caps.atomics = _v->attr.orig_attr.atomic_cap != IBV_ATOMIC_NONE;
    _caps.max_send_sge = uint32_t(std::max(1, _v->attr.orig_attr.max_sge));
    _caps.memory_windows = (_v->attr.orig_attr.device_cap_flags &
                            (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0;

    errno = 0;
    ibv_td_init_attr td_attr{};
    ibv_td* td = ibv_alloc_td(_ctx, &td_attr);
    ibv_pd* pd = ibv_alloc_pd(_ctx);
    if (!pd) {
        int e = errno;
        if (td) {
            ibv_dealloc_td(td);
        }
        throw device_error(internal::errno_text("ibv_alloc_pd(" + _name + ")", e));
    }
    if (!td) {
        _caps.thread_domain_errno = errno ? errno : EOPNOTSUPP;
    } else {
        ibv_parent_domain_init_attr pattr{};
        pattr.pd = pd;
        pattr.td = td;
        errno = 0;
        ibv_pd* parent = ibv_alloc_parent_domain(_ctx, &pattr);
        if (parent) {
            _caps.thread_domain = true;
            ibv_dealloc_pd(parent);
        } else {
            _caps.thread_domain_errno = errno ? errno : EOPNOTSUPP;
        }
        ibv_dealloc_td(td);
    }

    ibv_cq* cq = ibv_create_cq(_ctx, 4, nullptr, nullptr, 0);
    if (cq) {
        for (uint32_t want : {1024u, 512u, 256u, 128u, 64u, 32u}) {
            ibv_qp_init_attr a{};
            a.send_cq = cq;
            a.recv_cq = cq;
            a.qp_type = IBV_QPT_RC;
            a.cap.max_send_wr = 4;
            a.cap.max_recv_wr = 1;
            a.cap.max_send_sge = 1;
            a.cap.max_recv_sge = 1;
            a.cap.max_inline_data = want;
            if (ibv_qp* qp = ibv_create_qp(pd, &a)) {
                _caps.max_inline_data = a.cap.max_inline_data;
                ibv_destroy_qp(qp);
                break;
            }
        }
        ibv_destroy_cq(cq);
    }
    ibv_dealloc_pd(pd);
}

std::string device::gid_text() const {
    return gid_string(_v->gid);
}

std::string device::link_layer() const {
    return _v->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
}

std::string device::describe() const {
    return fmt::format(
        "{} port {} ({}, MTU {}), GID[{}] {} ({}), inline {} B, {} send SGEs, thread domain: {}", _name,
        _port, link_layer(), 128 << _v->port_attr.active_mtu, _gid_index, gid_text(), _gid_type,
        _caps.max_inline_data, _caps.max_send_sge,
        _caps.thread_domain ? std::string("yes")
                            : fmt::format("no ({})", std::strerror(_caps.thread_domain_errno)));
}

} // namespace shoal::net::rdma
