#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <netinet/in.h>
#include <sys/socket.h>

namespace shoal::net {

/// An IPv4 or IPv6 address with a port.
class socket_address {
public:
    /// 0.0.0.0 port 0 (IPv4, any address).
    socket_address() noexcept;
    /// Wraps a sockaddr of `len` bytes (AF_INET or AF_INET6).
    socket_address(const sockaddr* sa, socklen_t len) noexcept;
    /// An IPv4 address in host byte order (e.g. INADDR_LOOPBACK) and port.
    socket_address(uint32_t ipv4_host_order, uint16_t port) noexcept;

    /// Parses "1.2.3.4:80", "[::1]:80", "localhost:80" (numeric hosts and "localhost" only:
    /// no DNS on a reactor thread), or "host" with `default_port`. Throws std::invalid_argument
    /// naming the text on a bad address.
    static socket_address parse(std::string_view text, uint16_t default_port = 0);
    /// Parses a host (numeric or "localhost") and a separate port.
    static socket_address from_host_port(std::string_view host, uint16_t port);

    /// AF_INET or AF_INET6.
    int family() const noexcept { return _storage.ss_family; }
    /// True for an AF_INET6 address.
    bool is_ipv6() const noexcept { return family() == AF_INET6; }
    /// The port, in host byte order.
    uint16_t port() const noexcept;
    /// Replaces the port (host byte order).
    void set_port(uint16_t port) noexcept;
    /// The address as a sockaddr of `length()` bytes, for system calls.
    const sockaddr* as_sockaddr() const noexcept { return reinterpret_cast<const sockaddr*>(&_storage); }
    /// The same, writable.
    sockaddr* as_sockaddr() noexcept { return reinterpret_cast<sockaddr*>(&_storage); }
    /// sizeof(sockaddr_in) or sizeof(sockaddr_in6), by family.
    socklen_t length() const noexcept;
    /// "1.2.3.4:80" or "[::1]:80".
    std::string to_string() const;
    /// The host part only ("1.2.3.4", "::1").
    std::string host() const;

    /// Equal when the first `length()` bytes of both sockaddrs match (family, address, port and,
    /// for IPv6, flow info and scope id).
    bool operator==(const socket_address& o) const noexcept;

private:
    sockaddr_storage _storage;
};

} // namespace shoal::net
