#pragma once

#include "core/abort_source.hh"
#include "core/future.hh"
#include "net/rdma/cm_event.hh"
#include "net/rdma/options.hh"
#include "net/socket_address.hh"

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <rdma/rdma_cma.h>

namespace shoal::net::rdma {
class shard_context;
}

namespace shoal::net::rdma::internal {

class connection_impl;
class connection_ref;
class listener_impl;
class acceptor;
class shared_receive_queue;

/// Every shard that listens on the same address shares one rdma_cm listening id (rdma_cm
/// cannot bind a port twice). The id lives on the shard that listened first (the owner); each
/// connect request goes round-robin to a member shard: its id is migrated to that shard's
/// event channel (`rdma_migrate_id`) and the QP is built from that shard's PD, CQ and SRQ.
struct listener_group {
    std::mutex mu; // guards members/next (touched by every member shard; control path only)
    std::string key;
    net::socket_address addr;
    unsigned owner_shard = 0;
    rdma_cm_id* id = nullptr;
    listener_impl* owner = nullptr;
    std::vector<std::pair<unsigned, uint64_t>> members; // (shard, acceptor id)
    size_t next = 0;
};

/// The handler of a group's listening id, on the owner shard.
class listener_impl final : public cm_handler {
public:
    /// Handles `g`'s listening id; made on the owner shard `ctx`, which keeps track of it.
    listener_impl(shard_context& ctx, std::shared_ptr<listener_group> g);
    ~listener_impl();
    /// Hands each connect request to the next member shard's acceptor (migrating the id when
    /// that is another shard); rejects it when no member is left.
    void on_cm_event(const cm_event& ev) noexcept override;
    /// Destroys the listening id (on the owner shard) and this object.
    void destroy() noexcept;

private:
    shard_context& _ctx;
    std::shared_ptr<listener_group> _group;
};

/// One shard's membership in a listener group: the connections the group sends to this shard,
/// established and waiting for `accept()`.
class acceptor {
public:
    /// An acceptor on `ctx`'s shard for group `g` (`listen_on` makes it a member); accepted
    /// connections get `opts`; at most `backlog` wait for `accept()` (set up or being set up).
    acceptor(shard_context& ctx, std::shared_ptr<listener_group> g, const connection_options& opts,
             unsigned backlog);
    ~acceptor();
    acceptor(const acceptor&) = delete;
    acceptor& operator=(const acceptor&) = delete;

    /// The next established connection; when `as` aborts first, fails at once with its reason
    /// (the acceptor keeps listening).
    future<std::shared_ptr<connection_ref>> accept(abort_source* as = nullptr);
    /// Fails a pending accept and stops accepting (leaves the group).
    void abort_accept() noexcept;
    /// Leaves the group; resolves when the listening id is gone if this was the last member.
    future<> close() noexcept;
    /// The group's listening address.
    net::socket_address local_address() const { return _group->addr; }
    /// Process-wide unique id: how the group names this member.
    uint64_t id() const noexcept { return _id; }
    /// The shard it lives on.
    unsigned shard() const noexcept { return _shard; }

    /// A connect request routed to this shard (its id already migrated here).
    void handle_request(rdma_cm_id* id, const cm_event& ev) noexcept;
    /// A connection accepted here became established: it goes to `accept()`.
    void deliver(connection_impl* c) noexcept;
    /// A connection accepted here failed before it was established.
    void connection_failed(connection_impl* c) noexcept;

private:
    shard_context* _ctx;
    shared_receive_queue* _srq; // the class of the connections it accepts, held until closed
    unsigned _shard;
    uint64_t _id;
    std::shared_ptr<listener_group> _group;
    connection_options _opts;
    unsigned _backlog;
    std::deque<std::shared_ptr<connection_ref>> _ready;
    std::optional<promise<std::shared_ptr<connection_ref>>> _waiter;
    abort_source::subscription _waiter_abort; // of the pending accept
    std::vector<connection_impl*> _pending;
    bool _closed = false;
    std::exception_ptr _abort;
};

/// Listens on `addr` from the calling shard (joining the group of the same address if another
/// shard already listens). Throws connection_error.
/// `backlog` is rdma_cm's; `accept_backlog` bounds the connections this shard holds for
/// `accept()`.
std::unique_ptr<acceptor> listen_on(const net::socket_address& addr, const connection_options& opts,
                                    int backlog, unsigned accept_backlog);
/// Connects from the calling shard; `as` (if given) aborts the setup: the future fails at once
/// with its reason and the half-made connection is torn down.
future<std::shared_ptr<connection_ref>>
connect_to(const net::socket_address& addr, const connection_options& opts, abort_source* as = nullptr);
/// Closes `a` (used by rdma::stop for acceptors the application did not close).
future<> close_acceptor(acceptor* a) noexcept;
/// The acceptor of the calling shard with this id, if it is still open.
acceptor* find_acceptor(uint64_t id) noexcept;

} // namespace shoal::net::rdma::internal
