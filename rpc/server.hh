#pragma once

#include "core/future.hh"
#include "core/gate.hh"
#include "core/metrics.hh"
#include "core/semaphore.hh"
#include "net/server_connections.hh"
#include "net/stream.hh"
#include "net/transport.hh"
#include "rpc/errors.hh"
#include "rpc/frame_io.hh"
#include "rpc/link.hh"
#include "rpc/rdma_link_options.hh"
#include "rpc/verb.hh"

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>

namespace shoal::rpc {

/// Limits of a server (one shard's instance).
struct server_options {
    /// Largest payload + attachments of one frame; a bigger frame closes the connection.
    size_t max_frame_size = size_t(64) << 20;
    /// Calls of one connection running at once; beyond it the connection is not read.
    unsigned max_in_flight_per_connection = 256;
    /// Calls of all connections of this server running at once; beyond it no connection is read.
    unsigned max_in_flight = 4096;
    /// Reply bytes queued for a connection that does not read them; beyond it the connection is
    /// not read until its client catches up (memory stays bounded by this plus one reply).
    size_t max_queued_reply_bytes = size_t(16) << 20;
    /// How long `stop()` lets running calls finish and replies drain before it aborts the
    /// connections.
    std::chrono::milliseconds stop_timeout{2000};
    /// Over the "rdma" transport: true accepts connections on the RDMA message path (one SEND
    /// per reply, large bodies by READ; clients must use it too), false the RDMA stream.
    bool rdma_messages = true;
    /// The RDMA message path's links: READ threshold, registration cache, READ pieces and
    /// parallelism, coalescing of small frames.
    rdma_link_options rdma;
};

/// What a server has done (this shard's instance).
struct server_stats {
    uint64_t connections_accepted = 0;   ///< connections served so far
    uint64_t connections_open = 0;       ///< connections open now
    uint64_t connections_aborted = 0;    ///< connections stop() aborted after stop_timeout
    uint64_t calls = 0;                  ///< requests and one-way calls dispatched
    uint64_t calls_in_flight = 0;        ///< handlers running now
    uint64_t errors_returned = 0;        ///< error replies (handler threw, unknown verb, bad signature)
    uint64_t protocol_errors = 0;        ///< connections closed for malformed frames
    uint64_t max_queued_reply_bytes = 0; ///< the most reply bytes ever queued for one connection
};

namespace detail {
class server_connection;
struct server_shared;
/// Runs a handler on a received call; resolves with the reply frame (its header's type and
/// payload set), or fails with what the handler threw.
using invoker_fn = future<outgoing_frame> (*)(void* object, frame&& call);
} // namespace detail

/// An RPC server for one shard. Register handlers, then `listen` (or hand it connections with
/// `serve`); every connection's calls run on this shard. For every core use
/// `sharded<rpc::server>`: each shard registers the same handlers and listens on the same
/// address, and the transport spreads the connections over them (SO_REUSEPORT for TCP, one
/// rdma_cm listener per shard for RDMA).
///
///     std::string_view echo(std::string_view s) { return s; }
///     rpc::server srv(net::make_transport("tcp"));
///     srv.register_handler<&echo>();
///     srv.listen(net::socket_address::parse("0.0.0.0:9000"));
class server {
public:
    /// A server that listens through `t`.
    explicit server(net::transport t, server_options o = {});
    /// A server without transport: only `serve` gives it connections.
    explicit server(server_options o = {});
    server(const server&) = delete;
    server& operator=(const server&) = delete;
    ~server();

    /// Registers free functions as handlers (`register_handler<&echo, &add>()`). Their verb ids
    /// come from their qualified names; throws duplicate_verb_error when one is already taken.
    template <auto... F>
    void register_handler() {
        (add_handler<F, void>(nullptr), ...);
    }
    /// Registers member function `F` called on `object` (which must outlive the server and
    /// every call still running).
    template <auto F, typename C>
    void register_handler(C* object) {
        static_assert(std::is_base_of_v<typename handler_traits<F>::klass, C>, "object is not of F's class");
        add_handler<F, typename handler_traits<F>::klass>(
            static_cast<typename handler_traits<F>::klass*>(object));
    }

    /// Listens on `addr` and accepts connections until `stop()`. Throws what the transport's
    /// listen throws.
    void listen(const net::socket_address& addr, net::listen_options opts = {});
    /// Serves `s` (a connection accepted or made elsewhere) until it closes or `stop()`.
    void serve(net::connected_socket s);
    /// Serves `l` (e.g. an `rdma_link`) until it closes or `stop()`.
    void serve(std::unique_ptr<link> l);
    /// Stops accepting, stops reading requests, lets running calls finish and their replies
    /// drain for `stop_timeout`, then aborts the connections that are left (through
    /// `net::server_connections`). Resolves in bounded time even if a handler never finishes or
    /// a client never reads (late replies are dropped). Call it before destroying a server that
    /// served anything.
    future<> stop();

    /// The address listened on (the port picked when 0 was asked for).
    net::socket_address local_address() const;
    /// Counters of this instance.
    server_stats stats() const noexcept;
    /// Seconds each handler took (dispatch to value or error), on this shard.
    const metrics::histogram& handler_latency() const noexcept;
    /// The limits in force.
    const server_options& options() const noexcept;

private:
    struct handler_entry {
        detail::invoker_fn invoke;
        void* object;
        uint32_t signature;
        std::string name;
    };

    template <auto F, typename C>
    void add_handler(C* object);
    void add_entry(uint64_t id, handler_entry e);
    future<> serve_connection(net::connected_socket s);
    void make_rdma();
    void abort_connections() noexcept;

    net::transport _transport;
    net::server_socket _listener;
    struct rdma_listening; // the RDMA message path's listener and its connections
    std::unique_ptr<rdma_listening> _rdma;
    std::shared_ptr<detail::server_shared> _shared;
    net::server_connections _conns;
    bool _stopped = false;

    friend class detail::server_connection;
    friend struct detail::server_shared;
};

namespace detail {

/// An exception's type name (demangled) and message, for error replies.
std::pair<std::string, std::string> describe(std::exception_ptr ex);

/// The reply frame for handler value `v` (or none for void).
template <typename T>
outgoing_frame reply_of(const T& v) {
    return make_frame(frame_type::response, v);
}
inline outgoing_frame empty_reply() {
    return make_frame(frame_type::response);
}

/// Calls `F` on `object` with the arguments in `args`.
template <auto F, typename C, typename Args>
decltype(auto) apply_handler(void* object, Args& args) {
    return std::apply(
        [object](auto&... a) -> decltype(auto) {
            if constexpr (std::is_void_v<C>) {
                (void)object;
                return F(std::move(a)...);
            } else {
                return (static_cast<C*>(object)->*F)(std::move(a)...);
            }
        },
        args);
}

/// Deserializes the arguments of `F` from `call`, runs it and builds the reply.
template <auto F, typename C>
future<outgoing_frame> invoke(void* object, frame&& call) {
    using traits = handler_traits<F>;
    using args_t = typename traits::args;
    using result_t = typename traits::result;
    using value_t = typename traits::value;
    try {
        if constexpr (internal::is_future<result_t>::value) {
            // Arguments (and the views into the received frame) must stay put while the
            // handler's future is pending: keep them on the heap with the frame.
            struct state {
                frame call;
                args_t args;
            };
            auto st = std::make_unique<state>();
            st->call = std::move(call);
            reader r(st->call.payload.view(), &st->call.attachments);
            deserialize(r, st->args);
            if (r.remaining() != 0) {
                throw protocol_error("trailing bytes after the arguments");
            }
            future<value_t> running = apply_handler<F, C>(object, st->args);
            return running.then([st = std::move(st)](auto&&... v) {
                if constexpr (sizeof...(v) == 0) {
                    return empty_reply();
                } else {
                    return reply_of(v...);
                }
            });
        } else {
            reader r(call.payload.view(), &call.attachments);
            args_t args;
            deserialize(r, args);
            if (r.remaining() != 0) {
                throw protocol_error("trailing bytes after the arguments");
            }
            if constexpr (std::is_void_v<result_t>) {
                apply_handler<F, C>(object, args);
                return make_ready_future<outgoing_frame>(empty_reply());
            } else {
                return make_ready_future<outgoing_frame>(reply_of(apply_handler<F, C>(object, args)));
            }
        }
    } catch (...) {
        return make_exception_future<outgoing_frame>(std::current_exception());
    }
}

} // namespace detail

template <auto F, typename C>
void server::add_handler(C* object) {
    static_assert(std::is_void_v<C> == std::is_void_v<typename handler_traits<F>::klass>,
                  "register member functions with register_handler<&cls::fn>(&object)");
    add_entry(verb_id<F>, handler_entry{&detail::invoke<F, C>, static_cast<void*>(object), signature_hash<F>,
                                        std::string(function_name<F>())});
}

} // namespace shoal::rpc
