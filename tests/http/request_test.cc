// The HTTP/1.x request-head parser of net/http: what is accepted, and the status of what is not.
#include "net/http/request.hh"

#include <gtest/gtest.h>

using namespace shoal::net::http;

namespace {

std::optional<int> status_of(std::string_view head) {
    auto [req, err] = parse_request(head);
    if (err) {
        return err->status;
    }
    return std::nullopt;
}

} // namespace

TEST(http_request, head_end_needs_a_blank_line) {
    EXPECT_FALSE(find_head_end("GET / HTTP/1.1\r\nHost: x\r\n"));
    EXPECT_EQ(find_head_end("GET / HTTP/1.1\r\nHost: x\r\n\r\nrest"), 27u);
    EXPECT_EQ(find_head_end("GET / HTTP/1.0\n\n"), 16u);
    EXPECT_FALSE(find_head_end(""));
}

TEST(http_request, parses_a_scrape) {
    auto [r, err] =
        parse_request("GET /metrics?name[]=x HTTP/1.1\r\nHost: h:9\r\nUser-Agent:  Prometheus/2.42 \r\n"
                      "Accept: text/plain\r\n\r\n");
    ASSERT_FALSE(err);
    EXPECT_EQ(r.method, "GET");
    EXPECT_EQ(r.path, "/metrics");
    EXPECT_EQ(r.query, "name[]=x");
    EXPECT_EQ(r.minor_version, 1);
    EXPECT_TRUE(r.keep_alive);
    EXPECT_FALSE(r.has_body);
    EXPECT_EQ(r.header("user-agent"), "Prometheus/2.42");
    EXPECT_FALSE(r.header("cookie"));
}

TEST(http_request, connection_rules) {
    EXPECT_FALSE(parse_request("GET / HTTP/1.1\r\nHost: h\r\nConnection: Close\r\n\r\n").first.keep_alive);
    EXPECT_FALSE(parse_request("GET / HTTP/1.0\r\n\r\n").first.keep_alive);
    EXPECT_TRUE(parse_request("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").first.keep_alive);
}

TEST(http_request, bodies_are_flagged) {
    EXPECT_TRUE(parse_request("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n").first.has_body);
    EXPECT_TRUE(
        parse_request("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n").first.has_body);
    EXPECT_FALSE(parse_request("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n").first.has_body);
}

TEST(http_request, malformed_heads_get_400) {
    for (std::string_view bad : {
             "\r\n\r\n",                                                // empty request line
             "GET\r\n\r\n",                                             // no target
             "GET /metrics\r\n\r\n",                                    // HTTP/0.9 style
             "GET  /metrics HTTP/1.1\r\nHost: h\r\n\r\n",               // double space
             "GET /metrics HTTP/1.1 x\r\nHost: h\r\n\r\n",              // extra word
             "G(T /metrics HTTP/1.1\r\nHost: h\r\n\r\n",                // bad method
             "GET metrics HTTP/1.1\r\nHost: h\r\n\r\n",                 // target not absolute path
             "GET /a\x01 HTTP/1.1\r\nHost: h\r\n\r\n",                  // control byte in target
             "GET / HTTP/1.x\r\nHost: h\r\n\r\n",                       // bad version
             "GET / FTP/1.1\r\nHost: h\r\n\r\n",                        // not HTTP
             "GET / HTTP/1.1\r\n\r\n",                                  // 1.1 without Host
             "GET / HTTP/1.1\r\nHost h\r\n\r\n",                        // header without colon
             "GET / HTTP/1.1\r\n: v\r\nHost: h\r\n\r\n",                // empty header name
             "GET / HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n",            // obsolete line folding
             "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", // bad length
         }) {
        EXPECT_EQ(status_of(bad), 400) << bad;
    }
}

TEST(http_request, other_major_versions_get_505) {
    EXPECT_EQ(status_of("GET / HTTP/2.0\r\nHost: h\r\n\r\n"), 505);
    EXPECT_EQ(status_of("GET / HTTP/0.9\r\nHost: h\r\n\r\n"), 505);
}
