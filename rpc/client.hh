#pragma once

#include "core/clock.hh"
#include "core/future.hh"
#include "core/semaphore.hh"
#include "core/small_pool.hh"
#include "core/timer.hh"
#include "net/socket_address.hh"
#include "net/stream.hh"
#include "net/transport.hh"
#include "rpc/errors.hh"
#include "rpc/frame_io.hh"
#include "rpc/link.hh"
#include "rpc/rdma_link_options.hh"
#include "rpc/verb.hh"

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

namespace shoal::rpc {

/// Limits and defaults of a client connection.
struct client_options {
    /// Calls waiting for their reply at once; more callers wait for a slot.
    unsigned max_in_flight = 1024;
    /// Largest reply (payload + attachments) accepted; a bigger one closes the connection.
    size_t max_frame_size = size_t(64) << 20;
    /// Deadline of `call` (zero: none); `call_for` sets one per call.
    std::chrono::milliseconds timeout{0};
    /// How long `close()` waits for replies to calls already sent before it aborts.
    std::chrono::milliseconds close_timeout{1000};
    /// Over the "rdma" transport: true uses the RDMA message path (one SEND per call, large
    /// bodies by READ; the server must use it too), false the RDMA stream as TCP does.
    bool rdma_messages = true;
    /// The RDMA message path's links: READ threshold, registration cache, READ pieces and
    /// parallelism, coalescing of small frames.
    rdma_link_options rdma;
};

namespace detail {

/// How argument `A` is written for parameter type `P`: as itself when the types match, as a
/// string_view for string parameters, else converted to `P`.
template <typename P, typename A>
decltype(auto) as_wire(const A& a) {
    if constexpr (std::is_same_v<std::remove_cvref_t<A>, P>) {
        return (a);
    } else if constexpr ((std::is_same_v<P, std::string> ||
                          std::is_same_v<P, std::string_view>)&&std::is_convertible_v<const A&,
                                                                                      std::string_view>) {
        return std::string_view(a);
    } else {
        return P(a);
    }
}

/// The state of a client connection, shared with its link and timers.
class client_state;

/// A call waiting for its reply. Its slot resolves it exactly once, with the reply or an error;
/// it then frees itself.
class pending_call {
public:
    /// The reply arrived: decodes it and resolves the caller's future.
    virtual void complete(frame&& reply) noexcept = 0;
    /// The call failed (timeout, connection down, client closed).
    virtual void fail(std::exception_ptr why) noexcept = 0;

protected:
    ~pending_call() = default;
};

} // namespace detail

/// One connection to an RPC server, with many calls in flight (each reply finds its caller by
/// request id, in whatever order the server answers).
///
///     rpc::client c(net::make_transport("tcp"));
///     co_await c.connect(net::socket_address::parse("127.0.0.1:9000"));
///     std::string r = co_await c.call<&echo>("hello");
///
/// A call fails with `remote_error` when the handler threw, `timeout_error` past its deadline,
/// `connection_error` when the connection is or goes down (every pending call fails at once),
/// `signature_mismatch_error` / `unknown_verb_error` when the server does not know the call.
class client {
public:
    /// A client that connects through `t`.
    explicit client(net::transport t, client_options o = {});
    client(client&&) noexcept;
    client& operator=(client&&) noexcept;
    /// Aborts the connection if still open (pending calls fail).
    ~client();

    /// Connects to `addr`. Fails with connection_error naming the address.
    future<> connect(net::socket_address addr);
    /// Uses `s`, an already connected socket (frames on its byte stream).
    void attach(net::connected_socket s);
    /// Uses `l`, an already connected link (e.g. `rdma_link`).
    void attach(std::unique_ptr<link> l);

    /// Calls `F` on the server with `args` (converted to `F`'s parameter types); resolves with
    /// its value (views become owning: string_view -> std::string).
    template <auto F, typename... A>
    future<call_result_t<F>> call(A&&... args) {
        return call_until<F>(default_deadline(), std::forward<A>(args)...);
    }
    /// `call` that fails with timeout_error unless the reply arrives within `timeout`.
    template <auto F, typename... A>
    future<call_result_t<F>> call_for(steady_clock_type::duration timeout, A&&... args) {
        return call_until<F>(steady_clock_type::now() + timeout, std::forward<A>(args)...);
    }
    /// Calls `F` without waiting for (or getting) a reply; resolves once the call is queued for
    /// sending. Errors of the handler are not reported.
    template <auto F, typename... A>
    future<> send(A&&... args) {
        try {
            auto f = build<F>(frame_type::one_way, args...);
            return send_one_way(std::move(f));
        } catch (...) {
            return make_exception_future<>(std::current_exception());
        }
    }

    /// Sends nothing more, waits up to `close_timeout` for the replies of calls already sent,
    /// then closes (or aborts) the connection. Calls still pending fail with connection_error.
    future<> close();
    /// Breaks the connection now: every pending call fails with connection_error.
    void abort() noexcept;
    /// True while connected and usable.
    bool connected() const noexcept;
    /// Calls waiting for their reply.
    size_t in_flight() const noexcept;

private:
    template <auto F, typename... A>
    static outgoing_frame build(frame_type type, const A&... args) {
        using params = typename handler_traits<F>::args;
        static_assert(sizeof...(A) == std::tuple_size_v<params>, "wrong number of arguments for this verb");
        return build_from<F, params>(type, std::index_sequence_for<A...>(), args...);
    }
    template <auto F, typename Params, size_t... I, typename... A>
    static outgoing_frame build_from(frame_type type, std::index_sequence<I...>, const A&... args) {
        auto f = make_frame(type, detail::as_wire<std::tuple_element_t<I, Params>>(args)...);
        f.header.verb = verb_id<F>;
        f.header.signature = signature_hash<F>;
        return f;
    }

    template <auto F, typename... A>
    future<call_result_t<F>> call_until(steady_clock_type::time_point deadline, A&&... args) {
        using R = call_result_t<F>;
        try {
            outgoing_frame f = build<F>(frame_type::request, args...);
            auto* c = new typed_call<R>();
            future<R> result = c->get_future();
            roundtrip(std::move(f), deadline, c); // (noexcept: it resolves `c`, once)
            return result;
        } catch (...) {
            return make_exception_future<R>(std::current_exception());
        }
    }

    /// A call whose reply decodes to `R`: the reply is decoded where it arrives and resolves
    /// the caller at once (no continuation, no task of its own in between).
    template <typename R>
    class typed_call final : public detail::pending_call {
    public:
        SHOAL_SMALL_POOL_ALLOCATED
        future<R> get_future() noexcept { return _result.get_future(); }
        void complete(frame&& reply) noexcept override {
            try {
                if constexpr (std::is_void_v<R>) {
                    decode_reply<R>(reply);
                    _result.set_value();
                } else {
                    _result.set_value(decode_reply<R>(reply));
                }
            } catch (...) {
                _result.set_exception(std::current_exception());
            }
            delete this;
        }
        void fail(std::exception_ptr why) noexcept override {
            _result.set_exception(std::move(why));
            delete this;
        }

    private:
        promise<R> _result;
    };

    template <typename R>
    static R decode_reply(frame& reply) {
        check_reply(reply);
        if constexpr (std::is_void_v<R>) {
            return;
        } else {
            reader r(reply.payload.view(), &reply.attachments);
            R value = deserialize<R>(r);
            if (r.remaining() != 0) {
                throw protocol_error("trailing bytes after the reply value");
            }
            return value;
        }
    }

    /// Throws the error a non-response reply carries.
    static void check_reply(const frame& reply);
    steady_clock_type::time_point default_deadline() const noexcept;
    /// Sends `f` as a call and has `c` resolved with its reply or error (always, once).
    void roundtrip(outgoing_frame&& f, steady_clock_type::time_point deadline,
                   detail::pending_call* c) noexcept;
    future<> send_one_way(outgoing_frame f);

    net::transport _transport;
    std::shared_ptr<detail::client_state> _state;
};

} // namespace shoal::rpc
