// The connection private data and the immediate data of stream messages (wire formats).
#include "net/rdma/private_data.hh"

#include <gtest/gtest.h>

using namespace shoal::net::rdma;
using namespace shoal::net::rdma::internal;

TEST(private_data, round_trips_with_and_without_region) {
    conn_params p;
    p.recv_buffer_size = 65536;
    p.credits = 16;
    p.ctrl_credits = 2;
    auto bytes = encode_conn_params(p);
    std::string err;
    auto q = decode_conn_params(bytes, err);
    ASSERT_TRUE(q) << err;
    EXPECT_EQ(q->recv_buffer_size, 65536u);
    EXPECT_EQ(q->credits, 16);
    EXPECT_EQ(q->ctrl_credits, 2);
    EXPECT_FALSE(q->region);

    p.region = remote_region{0x7f0012345678ull, 0xabcdef01u, 1ull << 33};
    bytes = encode_conn_params(p);
    q = decode_conn_params(bytes, err);
    ASSERT_TRUE(q && q->region);
    EXPECT_EQ(*q->region, *p.region);
    EXPECT_LE(bytes.size(), 56u) << "rdma_cm allows 56 bytes of private data in a connect request";
}

TEST(private_data, accepts_padding_rejects_garbage) {
    conn_params p;
    p.recv_buffer_size = 4096;
    p.credits = 1;
    p.ctrl_credits = 1;
    auto bytes = encode_conn_params(p);
    std::vector<uint8_t> padded(bytes.begin(), bytes.end());
    padded.resize(196, 0); // IB CM pads private data to its maximum
    std::string err;
    EXPECT_TRUE(decode_conn_params(padded, err));

    std::vector<uint8_t> shorter(bytes.begin(), bytes.begin() + 20);
    EXPECT_FALSE(decode_conn_params(shorter, err));
    EXPECT_NE(err.find("too short"), std::string::npos);

    auto wrong = bytes;
    wrong[0] ^= 1;
    EXPECT_FALSE(decode_conn_params(wrong, err));
    EXPECT_NE(err.find("not a shoal"), std::string::npos);

    auto version = bytes;
    version[5] = 9;
    EXPECT_FALSE(decode_conn_params(version, err));
    EXPECT_NE(err.find("version"), std::string::npos);

    conn_params zero;
    auto z = encode_conn_params(zero);
    EXPECT_FALSE(decode_conn_params(z, err));
}

TEST(private_data, reject_reason_round_trips) {
    auto r = encode_reject_reason("no receive buffers");
    auto back = decode_reject_reason(std::span(reinterpret_cast<const uint8_t*>(r.data()), r.size()));
    ASSERT_TRUE(back);
    EXPECT_EQ(*back, "no receive buffers");
    uint8_t junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    EXPECT_FALSE(decode_reject_reason(junk));
}

TEST(immediate, packs_kind_and_credits) {
    for (auto kind : {msg_kind::data, msg_kind::ctrl, msg_kind::fin, msg_kind::give_back}) {
        imm_fields f{kind, 123456, 17};
        auto g = decode_imm(encode_imm(f));
        EXPECT_EQ(g.kind, kind);
        EXPECT_EQ(g.credits, 123456u);
        EXPECT_EQ(g.ctrl_credits, 17u);
    }
    auto g = decode_imm(encode_imm({msg_kind::data, max_imm_credits, max_imm_ctrl_credits}));
    EXPECT_EQ(g.credits, max_imm_credits);
    EXPECT_EQ(g.ctrl_credits, max_imm_ctrl_credits);
    EXPECT_EQ(g.kind, msg_kind::data);
}
