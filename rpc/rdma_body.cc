// The descriptor of a body the receiver READs (see rpc/internal/rdma_body.hh).
#include "rpc/internal/rdma_body.hh"

#include "rpc/errors.hh"

#include <cstring>
#include <string>

namespace shoal::rpc::internal {

body_descriptor parse_body_descriptor(const frame_header& h, const char* message, size_t size, size_t chunk) {
    const bool remote_payload = (h.flags & frame_header::flag_remote_payload) != 0;
    const size_t remote = (remote_payload ? size_t(h.payload_size) : 0) + h.attachment_size;
    if (size < frame_header::size + body_descriptor_head) {
        throw protocol_error("RDMA message too short for its body descriptor");
    }
    const char* p = message + frame_header::size;
    size_t left = size - frame_header::size - body_descriptor_head;
    body_descriptor d;
    uint32_t count;
    std::memcpy(&d.transfer, p, 4);
    std::memcpy(&count, p + 4, 4);
    p += body_descriptor_head;
    if (count == 0 || count > max_body_regions || left < size_t(count) * body_region_size) {
        throw protocol_error("RDMA body descriptor with " + std::to_string(count) + " regions");
    }
    d.regions.resize(count);
    for (auto& r : d.regions) {
        uint32_t len;
        std::memcpy(&r.addr, p, 8);
        std::memcpy(&r.rkey, p + 8, 4);
        std::memcpy(&len, p + 12, 4);
        r.length = len;
        d.bytes += len;
        d.reads += (len + chunk - 1) / chunk;
        p += body_region_size;
    }
    left -= size_t(count) * body_region_size;
    d.remote_payload = remote_payload;
    d.inline_payload = remote_payload ? 0 : h.payload_size;
    if (d.bytes != remote || remote == 0 || left != d.inline_payload) {
        throw protocol_error("RDMA body descriptor does not match the frame's sizes");
    }
    return d;
}

char* encode_body_descriptor_head(char* p, uint32_t transfer, uint32_t regions) noexcept {
    std::memcpy(p, &transfer, 4);
    std::memcpy(p + 4, &regions, 4);
    return p + body_descriptor_head;
}

char* encode_body_region(char* p, const net::rdma::remote_region& r, uint32_t len) noexcept {
    std::memcpy(p, &r.addr, 8);
    std::memcpy(p + 8, &r.rkey, 4);
    std::memcpy(p + 12, &len, 4);
    return p + body_region_size;
}

} // namespace shoal::rpc::internal
