// The shoal C++ side of the C ABI's RDMA tests, as a separate process (on an RDMA device: the
// Soft-RoCE guest):
//
//   capi_rdma_peer pool-server IP MAX_LEASE CLIENT_QUOTA WATERMARK
//       a remote pool server; prints "listening on IP:PORT" and serves until killed.
//   capi_rdma_peer ring-consumer IP COUNT
//       a ring consumer (net::rdma::ring_consumer, 64 KiB); prints "ring IP:PORT HEX" (the
//       address and the 32-byte descriptor in shoal_ring_consumer_descriptor's format), then
//       checks COUNT records (format below) and exits 0 when all arrived in order and intact.
//
// A record: u32 index, u32 n, n payload bytes (byte k = (index * 31 + k) & 0xff), u64 FNV-1a
// of the payload; all little-endian. Bounded: gives up after 120 s.

#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "core/smp.hh"
#include "net/rdma/connection.hh"
#include "net/rdma/context.hh"
#include "net/rdma/services/remote_pool.hh"
#include "net/rdma/services/ring_channel.hh"
#include "net/socket_address.hh"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace shoal;
namespace rdma = shoal::net::rdma;

namespace {

uint64_t fnv1a(const char* p, size_t n) {
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; ++i) {
        h = (h ^ uint8_t(p[i])) * 1099511628211ULL;
    }
    return h;
}

/// Why record `expected` (the bytes `m`) is not right; "" when it is.
std::string check_record(std::span<const char> m, uint32_t expected) {
    uint32_t index, n;
    if (m.size() < 16) {
        return "record " + std::to_string(expected) + ": only " + std::to_string(m.size()) + " bytes";
    }
    std::memcpy(&index, m.data(), 4);
    std::memcpy(&n, m.data() + 4, 4);
    if (index != expected) {
        return "record " + std::to_string(expected) + " arrived as " + std::to_string(index);
    }
    if (m.size() != 16 + size_t(n)) {
        return "record " + std::to_string(index) + ": " + std::to_string(m.size()) +
               " bytes for a payload of " + std::to_string(n);
    }
    const char* payload = m.data() + 8;
    for (uint32_t k = 0; k < n; ++k) {
        if (uint8_t(payload[k]) != uint8_t(index * 31 + k)) {
            return "record " + std::to_string(index) + ": payload byte " + std::to_string(k) + " differs";
        }
    }
    uint64_t sum;
    std::memcpy(&sum, payload + n, 8);
    if (sum != fnv1a(payload, n)) {
        return "record " + std::to_string(index) + ": checksum differs";
    }
    return {};
}

future<int> ring_consumer(net::socket_address a, uint32_t count) {
    rdma::ring_consumer ring(64 << 10);
    rdma::listen_options lo;
    lo.connection = rdma::shard_context::local().opts().connection;
    lo.connection->region = ring.descriptor();
    rdma::listener l = rdma::listen_rc(a, lo);
    const auto d = ring.descriptor();
    unsigned char desc[32] = {};
    const uint64_t magic = 0x3143534544524853ULL; // "SHRDESC1"
    std::memcpy(desc, &magic, 8);
    std::memcpy(desc + 8, &d.addr, 8);
    std::memcpy(desc + 16, &d.rkey, 4);
    std::memcpy(desc + 24, &d.length, 8);
    std::string hex;
    for (unsigned char c : desc) {
        char two[3];
        std::snprintf(two, sizeof two, "%02x", c);
        hex += two;
    }
    std::printf("ring %s %s\n", l.local_address().to_string().c_str(), hex.c_str());
    std::fflush(stdout);

    const auto deadline = steady_clock_type::now() + std::chrono::seconds(240); // the whole C# run
    rdma::connection c = co_await with_timeout(deadline, l.accept());
    ring.attach(c);
    uint32_t received = 0;
    std::string first_error;
    uint64_t bytes = 0;
    while (received < count) {
        std::span<const char> m = co_await with_timeout(deadline, ring.receive());
        std::string e = check_record(m, received);
        if (!e.empty() && first_error.empty()) {
            first_error = e;
        }
        bytes += m.size();
        ++received;
    }
    ring.release();
    std::printf("received %u records (%lu bytes, %lu doorbells)%s%s\n", received, (unsigned long)bytes,
                (unsigned long)ring.stats().doorbells, first_error.empty() ? ", all intact" : ": ",
                first_error.c_str());
    co_return first_error.empty() ? 0 : 1;
}

future<int> pool_server(net::socket_address a, rdma::remote_pool_options o) {
    rdma::listener l = rdma::listen_rc(a);
    rdma::remote_pool_server srv(o);
    std::printf("listening on %s\n", l.local_address().to_string().c_str());
    std::fflush(stdout);
    std::vector<future<>> served;
    const auto deadline = steady_clock_type::now() + std::chrono::seconds(600);
    try {
        for (;;) {
            rdma::connection c = co_await with_timeout(deadline, l.accept());
            served.push_back(srv.serve(std::move(c)));
        }
    } catch (...) {
    }
    co_return 0;
}

int usage() {
    std::fprintf(stderr, "usage: capi_rdma_peer pool-server IP MAX_LEASE CLIENT_QUOTA WATERMARK\n"
                         "       capi_rdma_peer ring-consumer IP COUNT\n");
    return 2;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        return usage();
    }
    const std::string mode = argv[1];
    net::socket_address a = net::socket_address::parse(argv[2]);
    smp_options smp;
    smp.smp = 1;
    if (mode == "ring-consumer" && argc == 4) {
        const auto count = uint32_t(std::strtoul(argv[3], nullptr, 10));
        return run_shards(smp, [a, count]() -> future<int> {
            co_await rdma::start();
            int rc = co_await ring_consumer(a, count);
            co_await rdma::stop();
            co_return rc;
        });
    }
    if (mode == "pool-server" && argc == 6) {
        rdma::remote_pool_options o;
        o.max_lease = std::strtoull(argv[3], nullptr, 10);
        o.client_quota = std::strtoull(argv[4], nullptr, 10);
        o.watermark = std::strtoull(argv[5], nullptr, 10);
        return run_shards(smp, [a, o]() -> future<int> {
            co_await rdma::start();
            co_return co_await pool_server(a, o);
        });
    }
    return usage();
}
