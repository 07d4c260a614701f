#include "net/http/request.hh"

#include <algorithm>
#include <cctype>

namespace shoal::net::http {

namespace {

bool is_token_char(char c) {
    // RFC 9110 tchar
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
        s.remove_prefix(1);
    }
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
        s.remove_suffix(1);
    }
    return s;
}

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    return out;
}

bool has_token(std::string_view list, std::string_view token) {
    // Comma-separated, case-insensitive ("Connection: keep-alive, Upgrade").
    while (!list.empty()) {
        size_t comma = list.find(',');
        std::string_view item = trim(list.substr(0, comma));
        if (lower(item) == token) {
            return true;
        }
        if (comma == std::string_view::npos) {
            break;
        }
        list.remove_prefix(comma + 1);
    }
    return false;
}

} // namespace

std::optional<std::string_view> request::header(std::string_view name) const {
    for (const auto& [n, v] : headers) {
        if (n == name) {
            return std::string_view(v);
        }
    }
    return std::nullopt;
}

std::optional<size_t> find_head_end(std::string_view buf) noexcept {
    for (size_t i = 0; i < buf.size(); ++i) {
        if (buf[i] != '\n') {
            continue;
        }
        if (i + 1 < buf.size() && buf[i + 1] == '\n') {
            return i + 2;
        }
        if (i + 2 < buf.size() && buf[i + 1] == '\r' && buf[i + 2] == '\n') {
            return i + 3;
        }
    }
    return std::nullopt;
}

std::pair<request, std::optional<parse_error>> parse_request(std::string_view head) {
    request r;
    auto fail = [&r](int status, std::string reason) {
        r.keep_alive = false;
        return std::pair{std::move(r), std::optional<parse_error>(parse_error{status, std::move(reason)})};
    };
    size_t eol = head.find('\n');
    std::string_view line = head.substr(0, eol);
    if (!line.empty() && line.back() == '\r') {
        line.remove_suffix(1);
    }
    // METHOD SP request-target SP HTTP/1.x, single spaces.
    size_t sp1 = line.find(' ');
    size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp1 == 0 || sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
        return fail(400, "malformed request line");
    }
    std::string_view method = line.substr(0, sp1);
    std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    std::string_view version = line.substr(sp2 + 1);
    if (!std::all_of(method.begin(), method.end(), is_token_char)) {
        return fail(400, "malformed method");
    }
    if (target.empty() || target.front() != '/' ||
        std::any_of(target.begin(), target.end(), [](char c) { return c <= ' ' || c == 0x7f; })) {
        return fail(400, "malformed request target");
    }
    if (version.size() != 8 || !version.starts_with("HTTP/") || !std::isdigit((unsigned char)version[5]) ||
        version[6] != '.' || !std::isdigit((unsigned char)version[7])) {
        return fail(400, "malformed HTTP version");
    }
    if (version[5] != '1') {
        return fail(505, "only HTTP/1.x is served");
    }
    r.method = method;
    r.minor_version = version[7] - '0';
    size_t q = target.find('?');
    r.path = target.substr(0, q);
    if (q != std::string_view::npos) {
        r.query = target.substr(q + 1);
    }
    r.keep_alive = r.minor_version >= 1;

    std::string_view rest = eol == std::string_view::npos ? std::string_view() : head.substr(eol + 1);
    while (!rest.empty()) {
        size_t end = rest.find('\n');
        std::string_view h = rest.substr(0, end);
        rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
        if (!h.empty() && h.back() == '\r') {
            h.remove_suffix(1);
        }
        if (h.empty()) {
            break; // the blank line that ends the head
        }
        size_t colon = h.find(':');
        if (colon == 0 || colon == std::string_view::npos) {
            return fail(400, "malformed header line");
        }
        std::string_view name = h.substr(0, colon);
        if (!std::all_of(name.begin(), name.end(), is_token_char)) {
            return fail(400, "malformed header name"); // also refuses obsolete line folding
        }
        r.headers.emplace_back(lower(name), std::string(trim(h.substr(colon + 1))));
    }
    if (r.minor_version >= 1 && !r.header("host")) {
        return fail(400, "HTTP/1.1 request without Host");
    }
    if (r.header("transfer-encoding")) {
        r.has_body = true;
    }
    if (auto cl = r.header("content-length")) {
        if (cl->empty() ||
            !std::all_of(cl->begin(), cl->end(), [](char c) { return c >= '0' && c <= '9'; })) {
            return fail(400, "malformed Content-Length");
        }
        if (cl->find_first_not_of('0') != std::string_view::npos) {
            r.has_body = true;
        }
    }
    if (auto c = r.header("connection")) {
        if (has_token(*c, "close")) {
            r.keep_alive = false;
        } else if (has_token(*c, "keep-alive")) {
            r.keep_alive = true;
        }
    }
    return {std::move(r), std::nullopt};
}

const char* status_text(int status) noexcept {
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Unknown";
    }
}

} // namespace shoal::net::http
