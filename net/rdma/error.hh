#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace shoal::net::rdma {

/// Base of every error the RDMA layer throws or puts into a future.
class rdma_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// No usable RDMA device: none present, the named one is missing, or an address maps to none.
/// The message names what was looked for and what exists.
class device_error : public rdma_error {
public:
    using rdma_error::rdma_error;
};

/// Setting up a connection failed: rejected, unreachable, address/route resolution failed or
/// timed out, or the peer is not a shoal RDMA endpoint.
class connection_error : public rdma_error {
public:
    using rdma_error::rdma_error;
};

/// The connection is gone: closed by the peer, disconnected, or broken by an error on it. Every
/// operation pending on it fails with this (or with `remote_access_error`).
class connection_closed : public rdma_error {
public:
    using rdma_error::rdma_error;
};

/// A one-sided operation touched remote memory it may not: out of the region, wrong rkey,
/// missing permission, or a revoked region. The connection it ran on is broken.
class remote_access_error : public connection_closed {
public:
    using connection_closed::connection_closed;
};

/// The registered memory pool cannot satisfy an allocation (limit reached).
class pool_exhausted : public rdma_error {
public:
    using rdma_error::rdma_error;
};

namespace internal {
/// "what: strerror(err) (errno err)".
std::string errno_text(const std::string& what, int err);
/// Throws rdma_error with `errno_text(what, err)`.
[[noreturn]] void throw_errno(const std::string& what, int err);
} // namespace internal

} // namespace shoal::net::rdma
