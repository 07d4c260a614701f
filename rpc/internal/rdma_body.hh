#pragma once

// The descriptor of a body the receiver READs (the RDMA link's large frames): after the frame
// header in the message, u32 transfer id, u32 region count, then per region u64 address,
// u32 rkey, u32 length (host byte order: both ends run shoal on the same architecture); then
// the payload when it is not remote.

#include "net/rdma/memory_region.hh"
#include "rpc/wire.hh"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shoal::rpc::internal {

/// Bytes of the descriptor before its regions: transfer id and region count.
inline constexpr size_t body_descriptor_head = 8;
/// Bytes of one region in a descriptor.
inline constexpr size_t body_region_size = 16;
/// Regions one descriptor may list (the payload and the attachments).
inline constexpr uint32_t max_body_regions = 256;

/// Bytes of a message carrying a header, a descriptor of `regions` regions and `inline_payload`
/// payload bytes.
constexpr size_t body_message_size(size_t regions, size_t inline_payload) noexcept {
    return frame_header::size + body_descriptor_head + regions * body_region_size + inline_payload;
}

/// A descriptor as received: where the body is and how to READ it.
struct body_descriptor {
    uint32_t transfer = 0;                         ///< the sender's id of the body (released with it)
    std::vector<net::rdma::remote_region> regions; ///< the body's pieces, in order
    size_t bytes = 0;                              ///< their total length
    size_t reads = 0;                              ///< READ requests of at most `chunk` bytes they take
    bool remote_payload = false;                   ///< the payload is the first region (else it is inline)
    size_t inline_payload = 0;                     ///< payload bytes at the end of the message
};

/// Decodes the descriptor of `message` (`size` bytes, starting with the header `h` that has a
/// remote flag set), counting READs of at most `chunk` bytes. Throws `protocol_error` when it
/// is short, lists no or too many regions, or does not match the header's sizes.
body_descriptor parse_body_descriptor(const frame_header& h, const char* message, size_t size, size_t chunk);

/// Writes a descriptor's head (transfer id, region count) at `p`; returns where the regions go.
char* encode_body_descriptor_head(char* p, uint32_t transfer, uint32_t regions) noexcept;

/// Writes one region of `len` bytes at `r` at `p`; returns where the next one goes.
char* encode_body_region(char* p, const net::rdma::remote_region& r, uint32_t len) noexcept;

} // namespace shoal::rpc::internal
