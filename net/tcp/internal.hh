#pragma once

// Pieces shared by the TCP implementation files; not part of the public API.

#include "core/log.hh"
#include "core/reactor.hh"
#include "net/socket_address.hh"
#include "net/tcp/tcp.hh"

#include <cstdint>
#include <string_view>
#include <system_error>

namespace shoal::net::tcp::internal {

/// The logger of the TCP stack ("tcp").
extern logger tcp_log;

/// The calling shard's counters, writable.
stats& local_stats() noexcept;

/// `std::system_error` for `err` (a positive errno) whose message names the operation and the
/// address: "connect 127.0.0.1:1: Connection refused".
std::system_error make_error(int err, std::string_view op, const socket_address& addr);

/// Starts a connect; `as`, when not null, can cancel it (see tcp::connect).
future<connected_socket> start_connect(const socket_address& addr, const connect_options& opts,
                                       abort_source* as);

/// Applies TCP_NODELAY; returns errno or 0.
int set_nodelay(int fd, bool on) noexcept;

/// The io_uring user_data of a completion object, as cancellation keys it.
inline uint64_t user_data_of(io_completion* c) noexcept {
    return uint64_t(reinterpret_cast<uintptr_t>(c));
}

/// Cancels requests of an owner and counts each cancellation until its own completion has
/// arrived, so the owner (whose address is the key of the cancelled request) is not freed and
/// reused while a cancel request still waits in the submission queue. `Owner::cancel_done()`
/// runs after each.
template <typename Owner>
class canceller final : public io_completion {
public:
    /// Reports to `owner`, which must stay alive while cancellations are pending.
    explicit canceller(Owner& owner) noexcept
        : _owner(owner) {}
    /// Queues a cancellation of the request whose completion object is `target`.
    void cancel(io_completion* target) {
        io_uring_sqe* sqe = local_reactor().get_sqe();
        io_uring_prep_cancel64(sqe, user_data_of(target), 0);
        io_uring_sqe_set_data(sqe, static_cast<io_completion*>(this));
        ++_pending;
    }
    /// Cancellations whose completion has not arrived yet.
    unsigned pending() const noexcept { return _pending; }
    /// One cancellation completed: uncounts it and calls `Owner::cancel_done()`.
    void complete(int, uint32_t) noexcept override {
        --_pending;
        _owner.cancel_done();
    }

private:
    Owner& _owner;
    unsigned _pending = 0;
};

} // namespace shoal::net::tcp::internal
