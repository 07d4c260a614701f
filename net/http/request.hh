#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shoal::net::http {

/// The head of one HTTP/1.x request (request line and headers; bodies are not accepted).
struct request {
    std::string method;                                       ///< "GET", ...
    std::string path;                                         ///< the target without its query ("/metrics")
    std::string query;                                        ///< after '?', possibly empty
    int minor_version = 1;                                    ///< HTTP/1.<minor_version>
    std::vector<std::pair<std::string, std::string>> headers; ///< names lower-cased, values trimmed
    /// Whether the connection stays open after the response (HTTP/1.1 unless "Connection:
    /// close"; HTTP/1.0 only with "Connection: keep-alive").
    bool keep_alive = true;
    /// Whether a body follows the head (Content-Length > 0 or Transfer-Encoding). The server
    /// takes no bodies: such a request is answered 400 once its route is known.
    bool has_body = false;
    /// The value of header `name` (lower case), if present.
    std::optional<std::string_view> header(std::string_view name) const;
};

/// Why a request head was refused: the status to answer with and a one-line reason.
struct parse_error {
    int status = 400;
    std::string reason;
};

/// The end of the request head in `buf` (the index just past the blank line that ends it, which
/// may be "\r\n\r\n" or "\n\n"), or nothing when more bytes are needed.
std::optional<size_t> find_head_end(std::string_view buf) noexcept;

/// Parses a complete request head (as delimited by `find_head_end`). Malformations give 400 and
/// an unsupported version 505. Method and path are not judged here (404/405 are the router's).
std::pair<request, std::optional<parse_error>> parse_request(std::string_view head);

/// The reason phrase of a status code ("Not Found").
const char* status_text(int status) noexcept;

} // namespace shoal::net::http
