#pragma once

// The message API over an RDMA connection: each message is one SEND (its parts gathered by the
// NIC, one scatter-gather entry each), each receive buffer one message. Users reach it through
// rdma::connection::messages().

#include "net/message.hh"
#include "net/rdma/connection_impl.hh"

#include <memory>

namespace shoal::net::rdma::internal {

/// A net::message_connection over the SEND/RECV path of a connection (credits as for streams).
class message_socket final : public net::message_connection_impl {
public:
    /// Messages of the connection held by `ref`.
    explicit message_socket(std::shared_ptr<connection_ref> ref) noexcept
        : _ref(std::move(ref)) {}
    /// A receiver that still waits is forgotten (the connection may outlive this socket).
    ~message_socket() override { _ref->impl().drop_message_receiver(); }
    message_socket(const message_socket&) = delete;
    message_socket& operator=(const message_socket&) = delete;
    /// One SEND: inline when it fits, else registered parts in place and other parts copied
    /// into the pool first (at most one copy of each byte).
    future<> send(std::span<net::temporary_buffer> parts) override;
    /// The next received message: the receive buffer itself (no copy).
    future<std::optional<net::temporary_buffer>> receive() override;
    /// The next message handed to `r` from the receive completion itself (no task).
    bool receive_into(net::message_receiver& r) override;
    /// The peer's receive buffer size (capped by the pool's largest buffer): no message is
    /// split, so none may be larger.
    size_t max_message_size() const noexcept override;
    future<> close() override;
    void abort() noexcept override;
    net::socket_address peer_address() const override;

private:
    std::shared_ptr<connection_ref> _ref;
};

} // namespace shoal::net::rdma::internal
