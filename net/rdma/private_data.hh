#pragma once

#include "net/rdma/memory_region.hh"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace shoal::net::rdma::internal {

/// What each side of a connection tells the other in the rdma_cm connect/accept private data
/// (40 bytes, big-endian; rdma_cm allows 56 in a connect request):
///   0 magic "SHOL"  4 version  6 flags (bit 0: region present)  8 receive buffer size
///   12 data credits  14 control credits  16 region address  24 region rkey  28 reserved
///   32 region length
struct conn_params {
    /// Size of every receive buffer the sender of these params posted: the largest message the
    /// peer may send.
    uint32_t recv_buffer_size = 0;
    /// Receives reserved for the peer's data messages (its initial send window).
    uint16_t credits = 0;
    /// Receives reserved for the peer's credit-only messages.
    uint16_t ctrl_credits = 0;
    /// A region the sender offers for one-sided access.
    std::optional<remote_region> region;
};

inline constexpr uint32_t conn_magic = 0x53484f4c; // "SHOL"
inline constexpr uint16_t conn_version = 2;        // 2: the give_back message kind
inline constexpr size_t conn_params_size = 40;

/// Serializes `p` into the wire layout above.
std::array<uint8_t, conn_params_size> encode_conn_params(const conn_params& p) noexcept;
/// Parses private data; an error text (not a shoal endpoint, wrong version, too short,
/// nonsense values) when it cannot be used.
std::optional<conn_params> decode_conn_params(std::span<const uint8_t> data, std::string& error);

/// Private data of a rejection: the magic, then a short reason text.
std::string encode_reject_reason(const std::string& reason);
/// The reason shoal put in a rejection's private data, if it is one.
std::optional<std::string> decode_reject_reason(std::span<const uint8_t> data);

/// What a stream message carries in its immediate data (host order before htonl):
///   bits 31-30 kind, bits 29-24 control credits returned, bits 23-0 data credits returned —
///   except in a `give_back`, where bits 23-0 are the data credits the sender hands back unused
///   (it went quiet holding more than the receiver's idle window; the receiver releases their
///   receives). `ctrl` and `give_back` use one of the receiver's control credits.
enum class msg_kind : uint8_t { data = 0, ctrl = 1, fin = 2, give_back = 3 };
/// The immediate data of a stream message, unpacked.
struct imm_fields {
    msg_kind kind = msg_kind::data;
    uint32_t credits = 0;      ///< data credits returned (at most max_imm_credits)
    uint32_t ctrl_credits = 0; ///< control credits returned (at most max_imm_ctrl_credits)
};
inline constexpr uint32_t max_imm_credits = (1u << 24) - 1;
inline constexpr uint32_t max_imm_ctrl_credits = (1u << 6) - 1;

/// Packs the fields (host order; the caller converts with htonl).
inline uint32_t encode_imm(const imm_fields& f) noexcept {
    return (uint32_t(f.kind) << 30) | ((f.ctrl_credits & max_imm_ctrl_credits) << 24) |
           (f.credits & max_imm_credits);
}
/// Unpacks host-order immediate data.
inline imm_fields decode_imm(uint32_t v) noexcept {
    return imm_fields{msg_kind(v >> 30), v & max_imm_credits, (v >> 24) & max_imm_ctrl_credits};
}

} // namespace shoal::net::rdma::internal
