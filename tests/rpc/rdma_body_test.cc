// The descriptor of a body the RDMA link's receiver READs: encoded as the sender writes it and
// parsed as the receiver does, and malformed descriptors refused with a clear error. Plain
// bytes: no device, no reactor.
#include "rpc/errors.hh"
#include "rpc/internal/rdma_body.hh"
#include "rpc/wire.hh"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

using namespace shoal;
using namespace shoal::rpc;
using namespace shoal::rpc::internal;
using net::rdma::remote_region;

namespace {

/// A message as `send_remote` writes it: header, descriptor of `regions`, `inline_payload` bytes.
std::vector<char> body_message(const frame_header& h, uint32_t transfer,
                               const std::vector<remote_region>& regions, size_t inline_payload) {
    std::vector<char> m(body_message_size(regions.size(), inline_payload), 'p');
    h.encode(m.data());
    char* p = encode_body_descriptor_head(m.data() + frame_header::size, transfer, uint32_t(regions.size()));
    for (const auto& r : regions) {
        p = encode_body_region(p, r, uint32_t(r.length));
    }
    EXPECT_EQ(size_t(m.data() + m.size() - p), inline_payload);
    return m;
}

frame_header remote_attachments(uint32_t payload, uint32_t attachments) {
    frame_header h;
    h.payload_size = payload;
    h.attachment_size = attachments;
    h.flags = frame_header::flag_remote_attachments;
    return h;
}

/// The message of a `protocol_error` that parsing `m` throws ("" when it parses).
std::string parse_error(const frame_header& h, const std::vector<char>& m, size_t size) {
    try {
        parse_body_descriptor(h, m.data(), size, 4096);
    } catch (const protocol_error& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST(RdmaBodyDescriptor, AttachmentsRemoteAndPayloadInlineRoundTrip) {
    const frame_header h = remote_attachments(5, 10000 + 300);
    const std::vector<remote_region> regions{{0x1000, 7, 10000}, {0x9000, 8, 300}};
    const auto m = body_message(h, 42, regions, 5);
    const body_descriptor d = parse_body_descriptor(h, m.data(), m.size(), 4096);
    EXPECT_EQ(d.transfer, 42u);
    EXPECT_EQ(d.regions, regions);
    EXPECT_EQ(d.bytes, 10300u);
    EXPECT_EQ(d.reads, 3u + 1u); // 10,000 bytes in READs of at most 4,096, then 300
    EXPECT_FALSE(d.remote_payload);
    EXPECT_EQ(d.inline_payload, 5u);
}

TEST(RdmaBodyDescriptor, RemotePayloadIsTheFirstRegionAndNothingFollows) {
    frame_header h;
    h.payload_size = 8192;
    h.flags = frame_header::flag_remote_payload;
    const std::vector<remote_region> regions{{0x2000, 3, 8192}};
    const auto m = body_message(h, 1, regions, 0);
    const body_descriptor d = parse_body_descriptor(h, m.data(), m.size(), 1024);
    EXPECT_TRUE(d.remote_payload);
    EXPECT_EQ(d.inline_payload, 0u);
    EXPECT_EQ(d.bytes, 8192u);
    EXPECT_EQ(d.reads, 8u);
}

TEST(RdmaBodyDescriptor, MalformedDescriptorsAreProtocolErrors) {
    const frame_header h = remote_attachments(0, 100);
    const auto good = body_message(h, 9, {{0x1000, 1, 100}}, 0);
    EXPECT_EQ(parse_error(h, good, good.size()), "");

    // Cut inside the descriptor's head, and inside its region.
    EXPECT_NE(parse_error(h, good, frame_header::size + 4).find("too short"), std::string::npos);
    EXPECT_NE(parse_error(h, good, good.size() - 1).find("1 regions"), std::string::npos);

    // No region, and more regions than a descriptor may list.
    auto none = body_message(h, 9, {}, 0);
    EXPECT_NE(parse_error(h, none, none.size()).find("0 regions"), std::string::npos);
    auto many = good;
    const uint32_t too_many = max_body_regions + 1;
    std::memcpy(many.data() + frame_header::size + 4, &too_many, 4);
    EXPECT_NE(parse_error(h, many, many.size()).find("regions"), std::string::npos);

    // Regions that do not add up to the header's remote bytes, and trailing bytes that are not
    // the inline payload.
    const auto short_body = body_message(h, 9, {{0x1000, 1, 99}}, 0);
    EXPECT_NE(parse_error(h, short_body, short_body.size()).find("does not match"), std::string::npos);
    const auto trailing = body_message(h, 9, {{0x1000, 1, 100}}, 3);
    EXPECT_NE(parse_error(h, trailing, trailing.size()).find("does not match"), std::string::npos);

    // A header whose remote part is empty.
    const frame_header empty = remote_attachments(4, 0);
    const auto no_remote = body_message(empty, 9, {{0x1000, 1, 0}}, 4);
    EXPECT_NE(parse_error(empty, no_remote, no_remote.size()).find("does not match"), std::string::npos);
}
