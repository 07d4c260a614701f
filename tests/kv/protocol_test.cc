// The parser alone: what each kind of input produces (ready request, error reply, incomplete,
// close, skipped data block), the fields it fills, and its limits.
#include "kv/protocol/protocol.hh"

#include <string>

#include <gtest/gtest.h>

using namespace shoal::kv;

namespace {

parse_result parse(std::string_view in, request& r, size_t max_item = 1 << 20) {
    parser_limits l;
    l.max_item_size = max_item;
    return parse_request(in, r, l);
}

} // namespace

TEST(kv_parser, get_with_many_keys_beyond_the_token_limit) {
    request r;
    std::string line = "get";
    for (int i = 0; i < 100; ++i) {
        line += " k" + std::to_string(i);
    }
    line += "\r\n";
    std::string input = line + "get x\r\n"; // the request's views point into it
    auto p = parse(input, r);
    ASSERT_EQ(p.kind, parse_result::ready);
    EXPECT_EQ(p.consumed, line.size());
    ASSERT_EQ(r.keys.size(), 100u);
    EXPECT_EQ(r.keys[99], "k99");
    EXPECT_EQ(r.cmd, command::get);
}

TEST(kv_parser, storage_waits_for_the_whole_block) {
    request r;
    std::string full = "set k 5 -1 3 noreply\r\nabc\r\n";
    for (size_t n = 0; n < full.size(); ++n) {
        EXPECT_EQ(parse(full.substr(0, n), r).kind, parse_result::incomplete) << n;
    }
    auto p = parse(full, r);
    ASSERT_EQ(p.kind, parse_result::ready);
    EXPECT_EQ(p.consumed, full.size());
    EXPECT_EQ(r.value, "abc");
    EXPECT_EQ(r.client_flags, 5u);
    EXPECT_EQ(r.exptime, -1);
    EXPECT_TRUE(r.noreply);
}

TEST(kv_parser, bad_data_chunk_consumes_the_announced_length) {
    request r;
    auto p = parse("set k 0 0 2\r\nabcd\r\n", r);
    ASSERT_EQ(p.kind, parse_result::reply);
    EXPECT_EQ(p.text, "CLIENT_ERROR bad data chunk\r\n");
    EXPECT_EQ(p.consumed, std::string("set k 0 0 2\r\nabcd").size());
}

TEST(kv_parser, too_large_block_is_skipped_not_buffered) {
    request r;
    auto p = parse("set k 0 0 5000\r\n", r, 1024);
    ASSERT_EQ(p.kind, parse_result::ready);
    EXPECT_TRUE(r.too_large);
    EXPECT_EQ(p.skip, 5002u);
}

TEST(kv_parser, errors) {
    request r;
    struct row {
        const char* in;
        const char* reply;
    } rows[] = {
        {"\r\n", "ERROR\r\n"},
        {"bogus\r\n", "ERROR\r\n"},
        {"get\r\n", "ERROR\r\n"},
        {"set k 0 0\r\n", "ERROR\r\n"},
        {"set k 0 0 -1\r\n", "CLIENT_ERROR bad command line format\r\n"},
        {"set k x 0 1\r\n", "CLIENT_ERROR bad command line format\r\n"},
        {"set k 0 0 1 noreply x\r\n", "ERROR\r\n"},
        {"incr k x\r\n", "CLIENT_ERROR invalid numeric delta argument\r\n"},
        {"incr k -1\r\n", "CLIENT_ERROR invalid numeric delta argument\r\n"},
        {"touch k x\r\n", "CLIENT_ERROR invalid exptime argument\r\n"},
        {"delete k 1\r\n", "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"},
        {"mg k v v\r\n", "CLIENT_ERROR duplicate flag\r\n"},
        {"mg k Z\r\n", "CLIENT_ERROR invalid flag\r\n"},
        {"ma k Mx\r\n", "CLIENT_ERROR invalid mode for ma M token\r\n"},
        {"\x01\x02\xff\r\n", "ERROR\r\n"},
    };
    for (const auto& row : rows) {
        auto p = parse(row.in, r);
        EXPECT_EQ(p.kind, parse_result::reply) << row.in;
        EXPECT_EQ(p.text, row.reply) << row.in;
    }
    std::string long_key = "get " + std::string(251, 'k') + "\r\n";
    EXPECT_EQ(parse(long_key, r).text, "CLIENT_ERROR bad command line format\r\n");
    // noreply hides the classic errors, as in memcached.
    EXPECT_EQ(parse("set k x 0 1 noreply\r\n", r).text, "");
}

TEST(kv_parser, ms_with_a_bad_flag_swallows_its_block) {
    request r;
    auto p = parse("ms k 3 Z\r\nabc\r\n", r);
    ASSERT_EQ(p.kind, parse_result::reply);
    EXPECT_EQ(p.text, "CLIENT_ERROR invalid flag\r\n");
    EXPECT_EQ(p.skip, 5u);
}

TEST(kv_parser, meta_flags_in_request_order) {
    request r;
    auto p = parse("mg key t v O123 k c q T30\r\n", r);
    ASSERT_EQ(p.kind, parse_result::ready);
    EXPECT_EQ(std::string(r.returns, r.return_count), "tOkc");
    EXPECT_TRUE(r.want_value);
    EXPECT_TRUE(r.noreply);
    EXPECT_TRUE(r.has_ttl);
    EXPECT_EQ(r.exptime, 30);
    EXPECT_EQ(r.opaque, "O123");
}

TEST(kv_parser, long_lines) {
    request r;
    // Without a newline: a non-get line over 2048 bytes closes the connection (memcached).
    EXPECT_EQ(parse(std::string(3000, 'x'), r).kind, parse_result::close);
    // A get line may keep growing (large multi-gets) up to its own limit.
    std::string get = "get";
    while (get.size() < 3000) {
        get += " key";
    }
    EXPECT_EQ(parse(get, r).kind, parse_result::incomplete);
    // A long line that arrived whole is parsed.
    auto p = parse("set " + std::string(3000, 'k') + " 0 0 1\r\n", r);
    EXPECT_EQ(p.text, "CLIENT_ERROR bad command line format\r\n");
}

TEST(kv_parser, numbers_follow_memcacheds_truncation) {
    request r;
    // Flags are an unsigned long truncated to 32 bits; a length that wraps to 0 wants 0 bytes.
    ASSERT_EQ(parse("set k 4294967296 0 1\r\na\r\n", r).kind, parse_result::ready);
    EXPECT_EQ(r.client_flags, 0u);
    ASSERT_EQ(parse("set k 0 0 4294967296\r\n\r\n", r).kind, parse_result::ready);
    EXPECT_EQ(r.value, "");
}

TEST(kv_parser, an_incomplete_storage_block_says_where_it_starts) {
    request r;
    std::string line = "set k 7 0 10\r\n";
    std::string in = line + "01234"; // the request's views point into it
    auto p = parse(in, r);
    ASSERT_EQ(p.kind, parse_result::incomplete);
    EXPECT_EQ(p.consumed, 0u);
    EXPECT_EQ(p.value_at, line.size());
    EXPECT_EQ(r.cmd, command::set);
    EXPECT_EQ(r.key, "k");
    EXPECT_EQ(r.client_flags, 7u);
    EXPECT_EQ(r.data_len, 10u);
    // The same for ms; a line that has not ended says nothing.
    std::string ms = "ms k 4 T9 O1\r\n";
    p = parse(ms, r);
    ASSERT_EQ(p.kind, parse_result::incomplete);
    EXPECT_EQ(p.value_at, ms.size());
    EXPECT_EQ(r.cmd, command::ms);
    EXPECT_EQ(r.data_len, 4u);
    EXPECT_EQ(r.opaque, "O1");
    p = parse("set k 0 0 10", r);
    ASSERT_EQ(p.kind, parse_result::incomplete);
    EXPECT_EQ(p.value_at, 0u);
    p = parse("get k", r);
    EXPECT_EQ(p.value_at, 0u);
}

TEST(kv_parser, a_binary_protocol_request_closes_the_connection) {
    request r;
    // memcached's binary GET of key "k": 24-byte header, no line end anywhere.
    std::string get("\x80\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00"
                    "\x00\x00\x00\x00\x00\x00\x00\x00k",
                    25);
    EXPECT_EQ(parse(get, r).kind, parse_result::close);
    EXPECT_EQ(parse(get.substr(0, 1), r).kind, parse_result::close);
    // 0x80 inside a text line is just a byte of the line.
    EXPECT_EQ(parse("get \x80\r\n", r).kind, parse_result::ready);
}

TEST(kv_parser, http_request_lines_close_the_connection_as_memcached_does) {
    request r;
    for (const char* line : {"GET / HTTP/1.0\r\n", "POST /x HTTP/1.1\r\n", "HEAD / HTTP/1.0\r\n",
                             "HTTP/1.0\r\n", "foo HTTP/\r\n", "FOO bar HTTP/1.0\r\n"}) {
        EXPECT_EQ(parse(line, r).kind, parse_result::close) << line;
    }
    // memcached answers these (checked against memcached 1.6.18): the HTTP/ token must end a
    // line whose command is unknown and at least two bytes long.
    for (const char* line :
         {"x HTTP/1.0\r\n", "GET /x\r\n", "foo http/1.0\r\n", "set / HTTP/1.0\r\n", "gx / HTTP/1.0\r\n"}) {
        auto p = parse(line, r);
        EXPECT_EQ(p.kind, parse_result::reply) << line;
        EXPECT_EQ(p.text, "ERROR\r\n") << line;
    }
    EXPECT_EQ(parse("get / HTTP/1.1\r\n", r).kind, parse_result::ready);
    EXPECT_EQ(parse("version HTTP/1.0\r\n", r).kind, parse_result::ready);
    EXPECT_EQ(parse("stats HTTP/1.0\r\n", r).kind, parse_result::ready); // the server says ERROR
}

TEST(kv_parser, an_opaque_token_is_at_most_32_bytes_with_its_flag) {
    request r;
    std::string ok = "mg k O" + std::string(31, 'x') + " v\r\n";
    auto p = parse(ok, r);
    ASSERT_EQ(p.kind, parse_result::ready);
    EXPECT_EQ(r.opaque.size(), 32u);
    std::string long_one = "mg k O" + std::string(32, 'x') + " v\r\n";
    p = parse(long_one, r);
    ASSERT_EQ(p.kind, parse_result::reply);
    EXPECT_EQ(p.text, "CLIENT_ERROR opaque token too long\r\n");
    p = parse("mg k O" + std::string(2000, 'x') + " v\r\n", r);
    ASSERT_EQ(p.kind, parse_result::reply);
    EXPECT_EQ(p.text, "CLIENT_ERROR opaque token too long\r\n");
}
