#pragma once

// The RPC frame: a fixed 40-byte header, the serialized payload, then the attachment bytes.
// docs/rpc.md documents the layout; this file has no reactor dependency (the fuzz target
// builds it alone).

#include "rpc/errors.hh"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace shoal::rpc {

/// What a frame carries.
enum class frame_type : uint8_t {
    request = 1,       ///< a call that wants a reply (same request id)
    one_way = 2,       ///< a call without reply
    response = 3,      ///< the handler's value
    error = 4,         ///< the handler threw: payload is (type name, message)
    unknown_verb = 5,  ///< no handler for the verb: payload is (verb name, message)
    bad_signature = 6, ///< the handler's signature hash differs: payload is (verb name, message)
};

/// The decoded header of a frame (all fields little-endian on the wire).
struct frame_header {
    /// "SRPC" read as a little-endian u32.
    static constexpr uint32_t magic_value = 0x43505253;
    /// Bumped on every incompatible change of the frame or the encoding (2: the flags below).
    static constexpr uint8_t current_version = 2;
    /// Flag: the payload is not in this message; the receiver READs it (RDMA message links).
    static constexpr uint16_t flag_remote_payload = 1;
    /// Flag: the attachments are not in this message; the receiver READs them (RDMA links).
    static constexpr uint16_t flag_remote_attachments = 2;
    /// Every flag a receiver knows.
    static constexpr uint16_t known_flags = flag_remote_payload | flag_remote_attachments;
    /// Bytes of the header on the wire.
    static constexpr size_t size = 40;

    frame_type type = frame_type::request;
    uint64_t verb = 0;
    uint64_t request_id = 0;
    uint32_t signature = 0;
    uint32_t payload_size = 0;
    uint32_t attachment_size = 0;
    uint16_t flags = 0; ///< `flag_*` bits (only RDMA message links send any)

    /// Payload and attachment bytes after the header.
    size_t body_size() const noexcept { return size_t(payload_size) + attachment_size; }

    /// Writes the header at `out` (`size` bytes).
    void encode(char* out) const noexcept {
        std::memset(out, 0, size);
        std::memcpy(out + 0, &magic_value, 4);
        out[4] = char(current_version);
        out[5] = char(type);
        std::memcpy(out + 6, &flags, 2);
        std::memcpy(out + 8, &verb, 8);
        std::memcpy(out + 16, &request_id, 8);
        std::memcpy(out + 24, &signature, 4);
        std::memcpy(out + 28, &payload_size, 4);
        std::memcpy(out + 32, &attachment_size, 4);
        // out[36..39]: reserved, zero
    }

    /// Decodes and checks `size` bytes at `in`: magic, version, frame type, known flags, zero
    /// reserved bytes, payload + attachment not over `max_frame`. Throws protocol_error.
    static frame_header decode(const char* in, size_t max_frame) {
        uint32_t magic;
        std::memcpy(&magic, in, 4);
        if (magic != magic_value) {
            throw protocol_error("not an RPC frame (bad magic)");
        }
        if (uint8_t(in[4]) != current_version) {
            throw protocol_error("RPC frame version " + std::to_string(uint8_t(in[4])) +
                                 ", this end speaks " + std::to_string(current_version));
        }
        uint8_t t = uint8_t(in[5]);
        if (t < uint8_t(frame_type::request) || t > uint8_t(frame_type::bad_signature)) {
            throw protocol_error("unknown RPC frame type " + std::to_string(t));
        }
        uint16_t flags;
        std::memcpy(&flags, in + 6, 2);
        uint32_t reserved;
        std::memcpy(&reserved, in + 36, 4);
        if ((flags & ~known_flags) != 0 || reserved != 0) {
            throw protocol_error("RPC frame with unknown flags");
        }
        frame_header h;
        h.type = frame_type(t);
        h.flags = flags;
        std::memcpy(&h.verb, in + 8, 8);
        std::memcpy(&h.request_id, in + 16, 8);
        std::memcpy(&h.signature, in + 24, 4);
        std::memcpy(&h.payload_size, in + 28, 4);
        std::memcpy(&h.attachment_size, in + 32, 4);
        if (h.body_size() > max_frame) {
            throw protocol_error("RPC frame of " + std::to_string(h.body_size()) +
                                 " bytes over the limit of " + std::to_string(max_frame));
        }
        return h;
    }
};

} // namespace shoal::rpc
