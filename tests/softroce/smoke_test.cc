// Soft-RoCE smoke test: proves the RDMA plumbing of the test bed with raw libibverbs, librdmacm
// and liburing (no shoal code). Registered with shoal_add_rdma_test, so it runs on the host's
// RDMA device or inside the Soft-RoCE guest (tests/softroce/run-in-guest.sh).
//   1. open the device (SHOAL_RDMA_DEVICE, default the first), check its port, register memory;
//   2. connect two RC QPs through rdma_cm on SHOAL_RDMA_IP (listener and connector in this one
//      thread, events polled from one channel), RDMA WRITE into the peer's MR, RDMA READ it back,
//      compare bytes;
//   3. one io_uring read in the same process.
#include "softroce/rdma_test_env.hh"

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <liburing.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using shoal::testing::rdma_test_env;

// The guest is emulated (TCG), the sanitizer build slower still and the host busy: be generous
// with every wait (each ends as soon as its event comes; only a hang reaches it).
constexpr auto cm_event_timeout = 90s;
constexpr auto completion_timeout = 90s;
constexpr size_t transfer_size = 64 * 1024; // 64 packets at the guest's 1024-byte MTU

[[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error(what);
}
[[noreturn]] void fail_errno(const std::string& what) {
    const int err = errno;
    fail(what + " failed: " + std::strerror(err) + " (errno " + std::to_string(err) + ")");
}

/// unique_ptr deleter that calls a C destroy function.
template <auto destroy>
struct c_deleter {
    template <typename T>
    void operator()(T* p) const {
        destroy(p);
    }
};
using device_list_ptr = std::unique_ptr<ibv_device*, c_deleter<ibv_free_device_list>>;
using context_ptr = std::unique_ptr<ibv_context, c_deleter<ibv_close_device>>;
using pd_ptr = std::unique_ptr<ibv_pd, c_deleter<ibv_dealloc_pd>>;
using cq_ptr = std::unique_ptr<ibv_cq, c_deleter<ibv_destroy_cq>>;
using mr_ptr = std::unique_ptr<ibv_mr, c_deleter<ibv_dereg_mr>>;
using channel_ptr = std::unique_ptr<rdma_event_channel, c_deleter<rdma_destroy_event_channel>>;

/// Destroys a cm id and its QP.
struct cm_id_deleter {
    void operator()(rdma_cm_id* id) const {
        if (id->qp) {
            rdma_destroy_qp(id);
        }
        rdma_destroy_id(id);
    }
};
using cm_id_ptr = std::unique_ptr<rdma_cm_id, cm_id_deleter>;

rdma_test_env load_env() {
    rdma_test_env env = rdma_test_env::from_environment();
    if (!env.error.empty()) {
        fail(env.error);
    }
    return env;
}

sockaddr_in ipv4_address(const std::string& ip, uint16_t port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    if (inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) {
        fail("SHOAL_RDMA_IP='" + ip + "' is not an IPv4 address");
    }
    return addr;
}

/// What the test needs from an rdma_cm event, copied out before the event is acknowledged.
struct cm_event {
    rdma_cm_event_type type;
    rdma_cm_id* id;
    int status;
    std::vector<uint8_t> private_data;
};

cm_event next_cm_event(rdma_event_channel* channel, const std::string& step) {
    pollfd pfd{channel->fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, std::chrono::milliseconds(cm_event_timeout).count());
    if (ready < 0) {
        fail_errno("poll on the rdma_cm event channel");
    }
    if (ready == 0) {
        fail(step + ": no rdma_cm event within " + std::to_string(cm_event_timeout.count()) + " s");
    }
    rdma_cm_event* raw = nullptr;
    if (rdma_get_cm_event(channel, &raw) != 0) {
        fail_errno("rdma_get_cm_event");
    }
    cm_event event{raw->event, raw->id, raw->status, {}};
    if (raw->event == RDMA_CM_EVENT_CONNECT_REQUEST || raw->event == RDMA_CM_EVENT_ESTABLISHED) {
        const auto* data = static_cast<const uint8_t*>(raw->param.conn.private_data);
        event.private_data.assign(data, data + (data ? raw->param.conn.private_data_len : 0));
    }
    rdma_ack_cm_event(raw);
    return event;
}

cm_event expect_cm_event(rdma_event_channel* channel, rdma_cm_event_type expected, const std::string& step) {
    cm_event event = next_cm_event(channel, step);
    if (event.type != expected) {
        fail(step + ": expected " + rdma_event_str(expected) + ", got " + rdma_event_str(event.type) +
             " (status " + std::to_string(event.status) + ")");
    }
    return event;
}

/// Where the passive side's buffer is; sent in the accept's private data (same host: host order).
struct remote_buffer {
    uint64_t addr;
    uint32_t rkey;
    uint32_t length;
};

/// One end of the connection: memory, protection domain, completion queue, QP (on its cm id).
struct endpoint {
    std::vector<uint8_t> buffer = std::vector<uint8_t>(2 * transfer_size);
    pd_ptr pd;
    cq_ptr cq;
    mr_ptr mr;
    cm_id_ptr id; // declared last: its QP goes before the MR, CQ and PD

    void create_resources(rdma_cm_id* cm_id) {
        id.reset(cm_id);
        pd.reset(ibv_alloc_pd(cm_id->verbs));
        if (!pd) {
            fail_errno("ibv_alloc_pd");
        }
        cq.reset(ibv_create_cq(cm_id->verbs, 8, nullptr, nullptr, 0));
        if (!cq) {
            fail_errno("ibv_create_cq");
        }
        mr.reset(ibv_reg_mr(pd.get(), buffer.data(), buffer.size(),
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ));
        if (!mr) {
            fail_errno("ibv_reg_mr (is RLIMIT_MEMLOCK too low?)");
        }
        ibv_qp_init_attr attr{};
        attr.send_cq = cq.get();
        attr.recv_cq = cq.get();
        attr.qp_type = IBV_QPT_RC;
        attr.cap.max_send_wr = 4;
        attr.cap.max_recv_wr = 1;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 1;
        if (rdma_create_qp(cm_id, pd.get(), &attr) != 0) {
            fail_errno("rdma_create_qp");
        }
    }

    /// Posts one signaled RDMA WRITE or READ between buffer[offset..) and the remote buffer, and
    /// busy-polls its completion.
    void rdma(ibv_wr_opcode opcode, size_t offset, const remote_buffer& remote) {
        ibv_sge sge{reinterpret_cast<uintptr_t>(buffer.data() + offset), static_cast<uint32_t>(transfer_size),
                    mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = opcode;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = opcode;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = remote.addr;
        wr.wr.rdma.rkey = remote.rkey;
        ibv_send_wr* bad = nullptr;
        if (const int rc = ibv_post_send(id->qp, &wr, &bad); rc != 0) {
            errno = rc;
            fail_errno("ibv_post_send");
        }
        const auto deadline = std::chrono::steady_clock::now() + completion_timeout;
        ibv_wc wc{};
        int n = 0;
        while ((n = ibv_poll_cq(cq.get(), 1, &wc)) == 0) {
            if (std::chrono::steady_clock::now() > deadline) {
                fail("no completion within " + std::to_string(completion_timeout.count()) + " s");
            }
            std::this_thread::yield();
        }
        if (n < 0) {
            fail("ibv_poll_cq failed");
        }
        if (wc.status != IBV_WC_SUCCESS) {
            fail(std::string("work completion error: ") + ibv_wc_status_str(wc.status));
        }
        if (wc.wr_id != static_cast<uint64_t>(opcode)) {
            fail("completion for an unexpected work request");
        }
    }
};

TEST(softroce_smoke, device_opens_and_registers_memory) {
    const rdma_test_env env = load_env();
    int count = 0;
    device_list_ptr devices(ibv_get_device_list(&count));
    ASSERT_TRUE(devices) << "ibv_get_device_list: " << std::strerror(errno);
    ASSERT_GT(count, 0) << "no RDMA device (is the rdma_rxe module loaded and rxe0 created?)";
    ibv_device* device = nullptr;
    std::string names;
    for (int i = 0; i < count; ++i) {
        const std::string name = ibv_get_device_name(devices.get()[i]);
        names += (names.empty() ? "" : ", ") + name;
        if (!device && (env.device.empty() || env.device == name)) {
            device = devices.get()[i];
        }
    }
    ASSERT_NE(device, nullptr) << "device " << env.device << " not found; devices: " << names;

    context_ptr context(ibv_open_device(device));
    ASSERT_TRUE(context) << "ibv_open_device(" << ibv_get_device_name(device)
                         << "): " << std::strerror(errno);
    ibv_port_attr port{};
    ASSERT_EQ(ibv_query_port(context.get(), 1, &port), 0) << "ibv_query_port";
    EXPECT_EQ(port.state, IBV_PORT_ACTIVE) << "port 1 is " << ibv_port_state_str(port.state);
    if (env.gid_index >= 0) {
        ibv_gid gid{};
        ASSERT_EQ(ibv_query_gid(context.get(), 1, env.gid_index, &gid), 0) << "ibv_query_gid";
        static constexpr uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (std::memcmp(gid.raw, v4_prefix, sizeof(v4_prefix)) == 0) { // RoCE: the GID is the address
            const sockaddr_in addr = ipv4_address(env.ip, 0);
            EXPECT_EQ(std::memcmp(gid.raw + 12, &addr.sin_addr, 4), 0)
                << "GID index " << env.gid_index << " does not carry SHOAL_RDMA_IP=" << env.ip;
        }
    }

    pd_ptr pd(ibv_alloc_pd(context.get()));
    ASSERT_TRUE(pd) << "ibv_alloc_pd: " << std::strerror(errno);
    std::vector<uint8_t> memory(transfer_size);
    mr_ptr mr(ibv_reg_mr(pd.get(), memory.data(), memory.size(),
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ));
    ASSERT_TRUE(mr) << "ibv_reg_mr: " << std::strerror(errno);
    EXPECT_EQ(mr->length, memory.size());
    EXPECT_EQ(mr->addr, memory.data());
}

TEST(softroce_smoke, rc_write_then_read_through_rdma_cm) {
    const rdma_test_env env = load_env();
    channel_ptr channel(rdma_create_event_channel());
    ASSERT_TRUE(channel) << "rdma_create_event_channel: " << std::strerror(errno);

    // Passive side: listen on the device's address, port chosen by the kernel.
    rdma_cm_id* raw_id = nullptr;
    ASSERT_EQ(rdma_create_id(channel.get(), &raw_id, nullptr, RDMA_PS_TCP), 0) << std::strerror(errno);
    cm_id_ptr listener(raw_id);
    sockaddr_in bind_addr = ipv4_address(env.ip, 0);
    ASSERT_EQ(rdma_bind_addr(listener.get(), reinterpret_cast<sockaddr*>(&bind_addr)), 0)
        << "rdma_bind_addr(" << env.ip << "): " << std::strerror(errno);
    ASSERT_EQ(rdma_listen(listener.get(), 1), 0) << "rdma_listen: " << std::strerror(errno);
    const uint16_t port = ntohs(rdma_get_src_port(listener.get()));
    ASSERT_NE(port, 0);

    // Active side: resolve the address and route, create its QP, connect.
    endpoint client;
    endpoint server;
    ASSERT_EQ(rdma_create_id(channel.get(), &raw_id, nullptr, RDMA_PS_TCP), 0) << std::strerror(errno);
    cm_id_ptr client_id(raw_id);
    sockaddr_in dst = ipv4_address(env.ip, port);
    ASSERT_EQ(rdma_resolve_addr(client_id.get(), nullptr, reinterpret_cast<sockaddr*>(&dst), 10000), 0)
        << "rdma_resolve_addr(" << env.ip << "): " << std::strerror(errno);
    expect_cm_event(channel.get(), RDMA_CM_EVENT_ADDR_RESOLVED,
                    "resolving " + env.ip + ":" + std::to_string(port));
    ASSERT_EQ(rdma_resolve_route(client_id.get(), 10000), 0)
        << "rdma_resolve_route: " << std::strerror(errno);
    expect_cm_event(channel.get(), RDMA_CM_EVENT_ROUTE_RESOLVED, "resolving the route");
    if (!env.device.empty()) {
        EXPECT_EQ(ibv_get_device_name(client_id->verbs->device), env.device)
            << "rdma_cm picked another device for " << env.ip;
    }
    client.create_resources(client_id.release());
    rdma_conn_param connect_param{};
    connect_param.initiator_depth = 1;
    connect_param.responder_resources = 1;
    connect_param.retry_count = 7;
    connect_param.rnr_retry_count = 7;
    ASSERT_EQ(rdma_connect(client.id.get(), &connect_param), 0) << "rdma_connect: " << std::strerror(errno);

    // Passive side: accept with the location of its buffer in the private data.
    const cm_event request = expect_cm_event(channel.get(), RDMA_CM_EVENT_CONNECT_REQUEST, "listening");
    server.create_resources(request.id);
    const remote_buffer advertised{reinterpret_cast<uintptr_t>(server.buffer.data()), server.mr->rkey,
                                   static_cast<uint32_t>(transfer_size)};
    rdma_conn_param accept_param = connect_param;
    accept_param.private_data = &advertised;
    accept_param.private_data_len = sizeof(advertised);
    ASSERT_EQ(rdma_accept(server.id.get(), &accept_param), 0) << "rdma_accept: " << std::strerror(errno);

    // Both ends report ESTABLISHED, in either order; the active one carries the private data.
    remote_buffer remote{};
    bool client_up = false;
    bool server_up = false;
    while (!client_up || !server_up) {
        const cm_event event = expect_cm_event(channel.get(), RDMA_CM_EVENT_ESTABLISHED, "connecting");
        if (event.id == client.id.get()) {
            ASSERT_GE(event.private_data.size(), sizeof(remote)) << "accept's private data lost";
            std::memcpy(&remote, event.private_data.data(), sizeof(remote));
            client_up = true;
        } else {
            ASSERT_EQ(event.id, server.id.get());
            server_up = true;
        }
    }
    ASSERT_EQ(remote.addr, advertised.addr);
    ASSERT_EQ(remote.rkey, advertised.rkey);

    // RDMA WRITE the first half of the client's buffer into the server's buffer.
    for (size_t i = 0; i < transfer_size; ++i) {
        client.buffer[i] = static_cast<uint8_t>(i * 7 + i / 251 + 1);
    }
    client.rdma(IBV_WR_RDMA_WRITE, 0, remote);
    ASSERT_TRUE(
        std::equal(client.buffer.begin(), client.buffer.begin() + transfer_size, server.buffer.begin()))
        << "RDMA WRITE completed but the server's memory differs from what was written";

    // RDMA READ it back into the (zeroed) second half and compare.
    client.rdma(IBV_WR_RDMA_READ, transfer_size, remote);
    ASSERT_TRUE(std::equal(client.buffer.begin(), client.buffer.begin() + transfer_size,
                           client.buffer.begin() + transfer_size))
        << "RDMA READ returned different bytes than were written";

    // Orderly disconnect: the client sends a DREQ; the server, told by DISCONNECTED, answers with
    // its own rdma_disconnect (the DREP), which completes the client's side.
    ASSERT_EQ(rdma_disconnect(client.id.get()), 0) << "rdma_disconnect(client): " << std::strerror(errno);
    bool client_down = false;
    bool server_down = false;
    while (!client_down || !server_down) {
        const cm_event event = expect_cm_event(channel.get(), RDMA_CM_EVENT_DISCONNECTED, "disconnecting");
        if (event.id == server.id.get()) {
            server_down = true;
            ASSERT_EQ(rdma_disconnect(server.id.get()), 0)
                << "rdma_disconnect(server): " << std::strerror(errno);
        } else {
            client_down = true;
        }
    }
}

TEST(softroce_smoke, io_uring_read_in_the_same_process) {
    io_uring ring{};
    const int init = io_uring_queue_init(8, &ring, 0);
    ASSERT_EQ(init, 0) << "io_uring_queue_init: " << std::strerror(-init)
                       << " (is io_uring disabled by kernel.io_uring_disabled or a seccomp filter?)";
    const int fd = memfd_create("softroce-smoke", 0);
    ASSERT_GE(fd, 0) << "memfd_create: " << std::strerror(errno);
    const std::string content = "shoal io_uring read through the Soft-RoCE test bed";
    ASSERT_EQ(write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));

    std::string read_back(content.size(), '\0');
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    ASSERT_NE(sqe, nullptr);
    io_uring_prep_read(sqe, fd, read_back.data(), read_back.size(), 0);
    io_uring_sqe_set_data64(sqe, 42);
    ASSERT_EQ(io_uring_submit(&ring), 1);
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec timeout{std::chrono::seconds(completion_timeout).count(), 0};
    const int wait = io_uring_wait_cqe_timeout(&ring, &cqe, &timeout);
    ASSERT_EQ(wait, 0) << "io_uring_wait_cqe_timeout: " << std::strerror(-wait);
    EXPECT_EQ(io_uring_cqe_get_data64(cqe), 42u);
    EXPECT_EQ(cqe->res, static_cast<int>(content.size())) << "read result " << cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    EXPECT_EQ(read_back, content);
    close(fd);
    io_uring_queue_exit(&ring);
}

} // namespace
