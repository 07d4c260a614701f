// The RPC encoding: every supported type round-trips with random values; truncated and
// malformed input fails with protocol_error; wire hashes tell types apart.

#include "rpc/serialize.hh"
#include "rpc/wire.hh"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

using namespace shoal;
using namespace shoal::rpc;

namespace {

enum class color : uint16_t { red = 1, green = 2, blue = 0xffff };

struct point {
    int32_t x = 0;
    double y = 0;
    friend bool operator==(const point&, const point&) = default;
};

struct record {
    std::string name;
    std::vector<point> points;
    std::optional<std::map<std::string, int64_t>> tags;
    std::variant<std::monostate, uint8_t, std::string> extra;
    std::array<color, 3> colors{};
    std::pair<bool, float> flag{};
    std::tuple<int8_t, uint64_t, std::vector<bool>> misc{};
    friend bool operator==(const record&, const record&) = default;
};

/// A type with a member serialize (a class with private fields, not an aggregate).
class account {
public:
    account() = default;
    account(std::string owner, int64_t balance)
        : _owner(std::move(owner))
        , _balance(balance) {}
    template <typename Archive>
    void serialize(Archive& a) {
        a(_owner, _balance);
    }
    friend bool operator==(const account&, const account&) = default;

private:
    std::string _owner;
    int64_t _balance = 0;
};

/// Serializes `v` into one buffer; attachments go to `att` joined into one buffer.
template <typename T>
std::string encode(const T& v, net::temporary_buffer* att = nullptr) {
    std::string out(serialized_size(v), '\0');
    rpc::attachment_list atts;
    writer w(out.data(), &atts);
    serialize(w, v);
    EXPECT_EQ(w.position(), out.data() + out.size());
    if (att) {
        std::string joined;
        for (auto& b : atts) {
            joined.append(b.view());
        }
        *att = net::temporary_buffer::copy_of(joined);
    }
    return out;
}

template <typename T>
T decode(std::string_view bytes, const net::temporary_buffer* att = nullptr) {
    reader r(bytes, att);
    T v = deserialize<T>(r);
    EXPECT_EQ(r.remaining(), 0u);
    return v;
}

/// Round-trips `v` and checks that every proper prefix of its encoding is refused cleanly.
template <typename T>
void round_trip(const T& v) {
    std::string bytes = encode(v);
    EXPECT_EQ(decode<T>(bytes), v);
    for (size_t cut = 0; cut < bytes.size(); cut = cut < 64 ? cut + 1 : cut * 2) {
        reader r(std::string_view(bytes.data(), cut));
        EXPECT_THROW(deserialize<T>(r), protocol_error) << "prefix of " << cut << " bytes";
    }
}

struct gen {
    std::mt19937_64 rng;
    explicit gen(uint64_t seed)
        : rng(seed) {}
    template <typename I>
    I integer() {
        return I(rng());
    }
    double real() { return std::uniform_real_distribution<double>(-1e12, 1e12)(rng); }
    size_t count(size_t max) { return rng() % (max + 1); }
    std::string text() {
        std::string s(count(40), '\0');
        for (auto& c : s) {
            c = char(rng());
        }
        return s;
    }
    point pt() { return point{integer<int32_t>(), real()}; }
    record rec() {
        record r;
        r.name = text();
        for (size_t i = count(5); i > 0; --i) {
            r.points.push_back(pt());
        }
        if (rng() & 1) {
            r.tags.emplace();
            for (size_t i = count(4); i > 0; --i) {
                (*r.tags)[text()] = integer<int64_t>();
            }
        }
        switch (rng() % 3) {
        case 0:
            r.extra = std::monostate{};
            break;
        case 1:
            r.extra = integer<uint8_t>();
            break;
        default:
            r.extra = text();
        }
        r.colors = {color::red, color::blue, color(integer<uint16_t>())};
        r.flag = {bool(rng() & 1), float(real())};
        std::vector<bool> bits(count(9));
        for (size_t i = 0; i < bits.size(); ++i) {
            bits[i] = rng() & 1;
        }
        r.misc = {integer<int8_t>(), integer<uint64_t>(), bits};
        return r;
    }
};

TEST(rpc_serialize, scalars_round_trip) {
    gen g(1);
    for (int i = 0; i < 200; ++i) {
        round_trip(g.integer<int8_t>());
        round_trip(g.integer<uint16_t>());
        round_trip(g.integer<int32_t>());
        round_trip(g.integer<uint64_t>());
        round_trip(g.real());
        round_trip(float(g.real()));
        round_trip(bool(g.rng() & 1));
        round_trip(color(g.integer<uint16_t>()));
    }
    round_trip(std::numeric_limits<int64_t>::min());
    round_trip(std::numeric_limits<double>::infinity());
    EXPECT_TRUE(std::isnan(decode<double>(encode(std::numeric_limits<double>::quiet_NaN()))));
}

TEST(rpc_serialize, containers_round_trip) {
    gen g(2);
    for (int i = 0; i < 200; ++i) {
        round_trip(g.text());
        std::vector<int32_t> ints(g.count(30));
        for (auto& x : ints) {
            x = g.integer<int32_t>();
        }
        round_trip(ints);
        std::vector<std::string> words(g.count(6));
        for (auto& w : words) {
            w = g.text();
        }
        round_trip(words);
        round_trip(std::array<uint32_t, 4>{g.integer<uint32_t>(), 1, 2, g.integer<uint32_t>()});
        round_trip(
            std::optional<std::string>(g.rng() & 1 ? std::optional<std::string>(g.text()) : std::nullopt));
        round_trip(std::variant<int, std::string, point>(g.pt()));
        round_trip(std::variant<int, std::string, point>(g.text()));
        round_trip(std::pair<std::string, double>(g.text(), g.real()));
        round_trip(std::tuple<>());
        std::map<int, std::string> m;
        std::unordered_map<std::string, std::vector<int8_t>> um;
        for (size_t k = g.count(5); k > 0; --k) {
            m[g.integer<int>()] = g.text();
            um[g.text()] = {g.integer<int8_t>()};
        }
        round_trip(m);
        round_trip(um);
    }
}

TEST(rpc_serialize, aggregates_and_member_serialize_round_trip) {
    static_assert(field_count<point> == 2);
    static_assert(field_count<record> == 7);
    gen g(3);
    for (int i = 0; i < 300; ++i) {
        round_trip(g.rec());
        round_trip(account(g.text(), g.integer<int64_t>()));
        round_trip(std::vector<account>{account(g.text(), 1), account(g.text(), 2)});
    }
}

TEST(rpc_serialize, views_point_into_the_received_buffer) {
    std::string bytes = encode(std::make_tuple(std::string("hello"), std::string("\x01\x02\x03", 3)));
    reader r(bytes);
    auto [text, raw] = deserialize<std::tuple<std::string_view, bytes_view>>(r);
    EXPECT_EQ(text, "hello");
    EXPECT_GE(text.data(), bytes.data());
    EXPECT_LT(text.data(), bytes.data() + bytes.size());
    ASSERT_EQ(raw.size(), 3u);
    EXPECT_EQ(raw[2], std::byte{3});
    EXPECT_EQ(reinterpret_cast<const char*>(raw.data()), bytes.data() + bytes.size() - 3);
}

TEST(rpc_serialize, attachments_travel_beside_the_payload_without_copy) {
    auto big = net::temporary_buffer::copy_of(std::string(100000, 'z'));
    const char* where = big.get();
    rpc::attachment_list atts;
    auto value = std::make_tuple(attachment(std::move(big)), std::string("meta"),
                                 attachment(net::temporary_buffer::copy_of("tail")));
    std::string payload(serialized_size(value), '\0');
    EXPECT_EQ(payload.size(), 4 + 8 + 4u); // lengths only
    writer w(payload.data(), &atts);
    serialize(w, value);
    ASSERT_EQ(atts.size(), 2u);
    EXPECT_EQ(atts[0].get(), where); // shared, not copied
    std::string joined = std::string(atts[0].view()) + std::string(atts[1].view());
    auto received = net::temporary_buffer::copy_of(joined);
    reader r(payload, &received);
    auto [a, meta, b] = deserialize<std::tuple<attachment, std::string, attachment>>(r);
    EXPECT_EQ(a.size(), 100000u);
    EXPECT_EQ(a.data.get(), received.get()); // a slice of the received buffer
    EXPECT_EQ(meta, "meta");
    EXPECT_EQ(b.view(), "tail");
    // An attachment length past the attachment bytes is refused.
    auto short_att = net::temporary_buffer::copy_of("tail");
    reader r2(payload, &short_att);
    EXPECT_THROW((deserialize<std::tuple<attachment, std::string, attachment>>(r2)), protocol_error);
}

TEST(rpc_serialize, malformed_input_is_a_clean_error) {
    // A bool that is neither 0 nor 1.
    EXPECT_THROW(decode<bool>(std::string(1, '\x02')), protocol_error);
    // A variant index out of range.
    std::string bad_variant = encode(uint32_t(7)) + encode(int(1));
    EXPECT_THROW((decode<std::variant<int, std::string>>(bad_variant)), protocol_error);
    // A huge element count with few bytes behind it: refused before any allocation.
    std::string huge = encode(uint32_t(0xffffffff)) + "abcd";
    EXPECT_THROW(decode<std::vector<uint64_t>>(huge), protocol_error);
    EXPECT_THROW(decode<std::vector<std::string>>(huge), protocol_error);
    EXPECT_THROW((decode<std::map<int, int>>(huge)), protocol_error);
    EXPECT_THROW(decode<std::string>(huge), protocol_error);
    // Empty elements cannot be repeated without bound.
    EXPECT_THROW(decode<std::vector<std::monostate>>(huge), protocol_error);
    // Duplicate map keys.
    std::string dup = encode(uint32_t(2)) + encode(int(5)) + encode(int(1)) + encode(int(5)) + encode(int(2));
    EXPECT_THROW((decode<std::map<int, int>>(dup)), protocol_error);
    // Nested optionals round-trip.
    using deep = std::optional<std::optional<std::optional<int>>>;
    EXPECT_EQ(decode<deep>(encode(deep(std::optional<std::optional<int>>(std::optional<int>(3)))))
                  .value()
                  .value()
                  .value(),
              3);
}

TEST(rpc_serialize, wire_hashes_follow_the_encoding) {
    static_assert(wire_hash<std::string>() == wire_hash<std::string_view>());
    static_assert(wire_hash<std::pair<int, double>>() == wire_hash<point>());
    static_assert(wire_hash<std::tuple<int, double>>() == wire_hash<point>());
    static_assert(wire_hash<int32_t>() != wire_hash<uint32_t>());
    static_assert(wire_hash<int32_t>() != wire_hash<int64_t>());
    static_assert(wire_hash<std::vector<int>>() != wire_hash<std::optional<int>>());
    static_assert(wire_hash<std::tuple<int, std::string>>() != wire_hash<std::tuple<std::string, int>>());
    static_assert(wire_hash<color>() == wire_hash<uint16_t>());
    static_assert(wire_hash<account>() != wire_hash<std::pair<std::string, int64_t>>());
    SUCCEED();
}

TEST(rpc_wire, header_round_trips_and_rejects_garbage) {
    frame_header h;
    h.type = frame_type::response;
    h.verb = 0x0123456789abcdefull;
    h.request_id = 42;
    h.signature = 0xdeadbeef;
    h.payload_size = 1000;
    h.attachment_size = 24;
    char buf[frame_header::size];
    h.encode(buf);
    auto d = frame_header::decode(buf, 1 << 20);
    EXPECT_EQ(d.type, frame_type::response);
    EXPECT_EQ(d.verb, h.verb);
    EXPECT_EQ(d.request_id, 42u);
    EXPECT_EQ(d.signature, 0xdeadbeef);
    EXPECT_EQ(d.payload_size, 1000u);
    EXPECT_EQ(d.attachment_size, 24u);
    EXPECT_THROW(frame_header::decode(buf, 1000), protocol_error); // over the limit
    for (size_t byte : {0, 4, 5, 6, 36}) {
        char bad[frame_header::size];
        std::memcpy(bad, buf, sizeof bad);
        bad[byte] ^= 0x40;
        EXPECT_THROW(frame_header::decode(bad, 1 << 20), protocol_error) << "byte " << byte;
    }
}

TEST(rpc_reflect, function_names_are_qualified_and_stable) {
    EXPECT_EQ(function_name<&round_trip<int>>().find('&'), std::string_view::npos);
    EXPECT_EQ(fnv1a("a"), 0xaf63dc4c8601ec8cull); // the reference FNV-1a 64 value
}

} // namespace
