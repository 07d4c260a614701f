#include "kv/client/server_list.hh"

#include <charconv>
#include <stdexcept>
#include <string>

namespace shoal::kv {

namespace {

/// `text` as a number in [min, max], or an exception naming `what` and `entry`.
uint32_t number(std::string_view text, uint32_t min, uint32_t max, const char* what, std::string_view entry) {
    uint32_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < min || value > max) {
        throw std::invalid_argument("bad " + std::string(what) + " in server \"" + std::string(entry) + "\"");
    }
    return value;
}

server_endpoint parse_entry(std::string_view entry) {
    server_endpoint s;
    if (entry.starts_with("rdma://")) {
        s.transport = endpoint_transport::rdma;
        entry.remove_prefix(7);
    } else if (entry.starts_with("tcp://")) {
        entry.remove_prefix(6);
    } else if (entry.find("://") != std::string_view::npos) {
        throw std::invalid_argument("unknown scheme in server \"" + std::string(entry) +
                                    "\" (tcp:// or rdma://)");
    }
    std::string_view rest;
    if (entry.starts_with('[')) {
        auto close = entry.find(']');
        if (close == std::string_view::npos) {
            throw std::invalid_argument("missing ']' in server \"" + std::string(entry) + "\"");
        }
        s.host = std::string(entry.substr(1, close - 1));
        rest = entry.substr(close + 1);
        if (!rest.empty() && !rest.starts_with(':')) {
            throw std::invalid_argument("text after ']' in server \"" + std::string(entry) + "\"");
        }
    } else {
        auto colon = entry.find(':');
        s.host = std::string(entry.substr(0, colon));
        rest = colon == std::string_view::npos ? std::string_view() : entry.substr(colon);
        if (rest.size() > 1 && rest.substr(1).find(':') != rest.substr(1).rfind(':')) {
            throw std::invalid_argument("IPv6 addresses must be in brackets: server \"" + std::string(entry) +
                                        "\"");
        }
    }
    if (s.host.empty()) {
        throw std::invalid_argument("no address in server \"" + std::string(entry) + "\"");
    }
    if (!rest.empty()) {
        rest.remove_prefix(1); // ':'
        auto colon = rest.find(':');
        s.port = uint16_t(number(rest.substr(0, colon), 1, 65535, "port", entry));
        if (colon != std::string_view::npos) {
            s.weight = number(rest.substr(colon + 1), 1, 1000000, "weight", entry);
        }
    }
    return s;
}

} // namespace

std::vector<server_endpoint> parse_server_list(std::string_view text) {
    std::vector<server_endpoint> servers;
    while (true) {
        auto comma = text.find(',');
        auto entry = text.substr(0, comma);
        while (!entry.empty() && entry.front() == ' ') {
            entry.remove_prefix(1);
        }
        while (!entry.empty() && entry.back() == ' ') {
            entry.remove_suffix(1);
        }
        if (entry.empty()) {
            throw std::invalid_argument(
                text.empty() && servers.empty() ? "no servers given" : "an empty entry in the server list");
        }
        servers.push_back(parse_entry(entry));
        if (comma == std::string_view::npos) {
            break;
        }
        text.remove_prefix(comma + 1);
    }
    return servers;
}

} // namespace shoal::kv
