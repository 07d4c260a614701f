#include "net/socket_address.hh"

#include <cstring>
#include <stdexcept>

#include <arpa/inet.h>

namespace shoal::net {

socket_address::socket_address() noexcept {
    std::memset(&_storage, 0, sizeof(_storage));
    _storage.ss_family = AF_INET;
}

socket_address::socket_address(const sockaddr* sa, socklen_t len) noexcept {
    std::memset(&_storage, 0, sizeof(_storage));
    std::memcpy(&_storage, sa, std::min<size_t>(len, sizeof(_storage)));
}

socket_address::socket_address(uint32_t ipv4_host_order, uint16_t port) noexcept {
    std::memset(&_storage, 0, sizeof(_storage));
    auto* in = reinterpret_cast<sockaddr_in*>(&_storage);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(ipv4_host_order);
    in->sin_port = htons(port);
}

socket_address socket_address::from_host_port(std::string_view host_view, uint16_t port) {
    std::string host(host_view);
    if (host == "localhost") {
        host = "127.0.0.1";
    }
    socket_address a;
    std::memset(&a._storage, 0, sizeof(a._storage));
    auto* in4 = reinterpret_cast<sockaddr_in*>(&a._storage);
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&a._storage);
    if (host.empty() || host == "*") {
        in4->sin_family = AF_INET;
        in4->sin_addr.s_addr = htonl(INADDR_ANY);
        in4->sin_port = htons(port);
    } else if (inet_pton(AF_INET, host.c_str(), &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons(port);
    } else if (inet_pton(AF_INET6, host.c_str(), &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
    } else {
        throw std::invalid_argument("bad address '" + std::string(host_view) +
                                    "': expected an IPv4 or IPv6 literal or 'localhost'");
    }
    return a;
}

socket_address socket_address::parse(std::string_view text, uint16_t default_port) {
    std::string_view host = text;
    std::string_view port_text;
    if (!text.empty() && text.front() == '[') {
        auto close = text.find(']');
        if (close == std::string_view::npos) {
            throw std::invalid_argument("bad address '" + std::string(text) + "': missing ']'");
        }
        host = text.substr(1, close - 1);
        auto rest = text.substr(close + 1);
        if (!rest.empty()) {
            if (rest.front() != ':') {
                throw std::invalid_argument("bad address '" + std::string(text) +
                                            "': expected ':' after ']'");
            }
            port_text = rest.substr(1);
        }
    } else if (auto colon = text.rfind(':'); colon != std::string_view::npos && text.find(':') == colon) {
        host = text.substr(0, colon);
        port_text = text.substr(colon + 1);
    }
    uint16_t port = default_port;
    if (!port_text.empty()) {
        unsigned long v = 0;
        for (char c : port_text) {
            if (c < '0' || c > '9' || (v = v * 10 + unsigned(c - '0')) > 65535) {
                throw std::invalid_argument("bad port in address '" + std::string(text) + "'");
            }
        }
        port = uint16_t(v);
    }
    return from_host_port(host, port);
}

uint16_t socket_address::port() const noexcept {
    if (is_ipv6()) {
        return ntohs(reinterpret_cast<const sockaddr_in6*>(&_storage)->sin6_port);
    }
    return ntohs(reinterpret_cast<const sockaddr_in*>(&_storage)->sin_port);
}

void socket_address::set_port(uint16_t port) noexcept {
    if (is_ipv6()) {
        reinterpret_cast<sockaddr_in6*>(&_storage)->sin6_port = htons(port);
    } else {
        reinterpret_cast<sockaddr_in*>(&_storage)->sin_port = htons(port);
    }
}

socklen_t socket_address::length() const noexcept {
    return is_ipv6() ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

std::string socket_address::host() const {
    char buf[INET6_ADDRSTRLEN] = {};
    if (is_ipv6()) {
        inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&_storage)->sin6_addr, buf, sizeof(buf));
    } else {
        inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&_storage)->sin_addr, buf, sizeof(buf));
    }
    return buf;
}

std::string socket_address::to_string() const {
    return is_ipv6() ? "[" + host() + "]:" + std::to_string(port()) : host() + ":" + std::to_string(port());
}

bool socket_address::operator==(const socket_address& o) const noexcept {
    return length() == o.length() && std::memcmp(&_storage, &o._storage, length()) == 0;
}

} // namespace shoal::net
