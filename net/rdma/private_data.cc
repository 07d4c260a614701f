#include "net/rdma/private_data.hh"

#include <cstring>

#include <endian.h>

namespace shoal::net::rdma::internal {

namespace {
void put16(uint8_t* p, uint16_t v) {
    v = htobe16(v);
    std::memcpy(p, &v, 2);
}
void put32(uint8_t* p, uint32_t v) {
    v = htobe32(v);
    std::memcpy(p, &v, 4);
}
void put64(uint8_t* p, uint64_t v) {
    v = htobe64(v);
    std::memcpy(p, &v, 8);
}
uint16_t get16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return be16toh(v);
}
uint32_t get32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return be32toh(v);
}
uint64_t get64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return be64toh(v);
}
} // namespace

std::array<uint8_t, conn_params_size> encode_conn_params(const conn_params& p) noexcept {
    std::array<uint8_t, conn_params_size> out{};
    put32(&out[0], conn_magic);
    put16(&out[4], conn_version);
    put16(&out[6], p.region ? 1 : 0);
    put32(&out[8], p.recv_buffer_size);
    put16(&out[12], p.credits);
    put16(&out[14], p.ctrl_credits);
    if (p.region) {
        put64(&out[16], p.region->addr);
        put32(&out[24], p.region->rkey);
        put64(&out[32], p.region->length);
    }
    return out;
}

std::optional<conn_params> decode_conn_params(std::span<const uint8_t> data, std::string& error) {
    if (data.size() < conn_params_size) {
        error =
            "private data too short (" + std::to_string(data.size()) + " bytes): not a shoal RDMA endpoint";
        return std::nullopt;
    }
    if (get32(&data[0]) != conn_magic) {
        error = "private data lacks the shoal magic: not a shoal RDMA endpoint";
        return std::nullopt;
    }
    if (uint16_t v = get16(&data[4]); v != conn_version) {
        error = "peer speaks protocol version " + std::to_string(v) + ", this side " +
                std::to_string(conn_version);
        return std::nullopt;
    }
    conn_params p;
    uint16_t flags = get16(&data[6]);
    p.recv_buffer_size = get32(&data[8]);
    p.credits = get16(&data[12]);
    p.ctrl_credits = get16(&data[14]);
    if (flags & 1) {
        p.region = remote_region{get64(&data[16]), get32(&data[24]), get64(&data[32])};
    }
    if (p.recv_buffer_size == 0 || p.credits == 0 || p.ctrl_credits == 0) {
        error = "peer offers no receive buffers (size " + std::to_string(p.recv_buffer_size) + ", credits " +
                std::to_string(p.credits) + "/" + std::to_string(p.ctrl_credits) + ")";
        return std::nullopt;
    }
    return p;
}

std::string encode_reject_reason(const std::string& reason) {
    std::string out(4, '\0');
    put32(reinterpret_cast<uint8_t*>(out.data()), conn_magic);
    out += reason.substr(0, 120);
    return out;
}

std::optional<std::string> decode_reject_reason(std::span<const uint8_t> data) {
    if (data.size() < 4 || get32(data.data()) != conn_magic) {
        return std::nullopt;
    }
    std::string text(reinterpret_cast<const char*>(data.data()) + 4, data.size() - 4);
    text.resize(std::strlen(text.c_str()));
    return text;
}

} // namespace shoal::net::rdma::internal
