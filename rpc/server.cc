#include "rpc/server.hh"

#include "core/coroutine.hh"
#include "core/log.hh"
#include "core/timer.hh"
#include "net/rdma/connection.hh"
#include "rpc/rdma_link.hh"

#include <cxxabi.h>
#include <typeinfo>

namespace shoal::rpc {

namespace {
logger rpc_log("rpc");

std::string demangle(const char* name) {
    int status = 0;
    char* text = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string out = status == 0 && text ? text : name;
    std::free(text);
    return out;
}
} // namespace

namespace detail {

std::pair<std::string, std::string> describe(std::exception_ptr ex) {
    try {
        std::rethrow_exception(ex);
    } catch (const remote_error& e) {
        return {e.type_name(), e.what()};
    } catch (const std::exception& e) {
        return {demangle(typeid(e).name()), e.what()};
    } catch (...) {
        auto* type = abi::__cxa_current_exception_type();
        return {type ? demangle(type->name()) : "unknown", "a non-std exception"};
    }
}

/// What the connections of one server share; outlives the server while late handlers finish.
struct server_shared {
    explicit server_shared(server_options o)
        : options(o)
        , in_flight(o.max_in_flight) {}
    server_options options;
    semaphore in_flight;
    std::unordered_map<uint64_t, server::handler_entry> handlers;
    std::list<std::shared_ptr<server_connection>> connections;
    server_stats stats;
    /// Seconds a handler took, from dispatch to its value or error: 1 us .. 8 s.
    metrics::histogram handler_seconds = metrics::histogram::exponential(1e-6, 2, 24);
    uint64_t links_aborted = 0; // RDMA message connections aborted at the stop deadline
    bool stopping = false;
};

/// One client connection: reads frames while the limits allow, runs each call, queues replies.
/// It is its link's frame sink: a request is dispatched as the link completes it (over RDMA
/// inside the receive completion), and the link is paused while a limit has no room.
class server_connection final : public std::enable_shared_from_this<server_connection>, private frame_sink {
public:
    /// `tracked`: the connection's socket is in the server's net::server_connections (which
    /// shuts its input and counts its abort); false for RDMA message links.
    server_connection(std::shared_ptr<server_shared> shared, std::unique_ptr<link> l, bool tracked)
        : _shared(std::move(shared))
        , _link(std::move(l))
        , _in_flight(_shared->options.max_in_flight_per_connection)
        , _tracked(tracked) {}

    /// Serves until the peer closes, a protocol error, or stop; then waits for running calls
    /// and the last replies (stop bounds that wait by aborting the socket).
    future<> run(std::list<std::shared_ptr<server_connection>>::iterator self) {
        auto keep = shared_from_this();
        ++_shared->stats.connections_open;
        try {
            co_await read_requests();
        } catch (const protocol_error& e) {
            ++_shared->stats.protocol_errors;
            rpc_log.warn("closing connection from {}: {}", peer(), e.what());
            _link->abort();
            _link->abort_output(std::current_exception());
        } catch (...) {
            rpc_log.debug("connection from {} ended: {}", peer(), std::current_exception());
        }
        // No more requests: let the running calls reply, then close the output.
        if (_running > 0) {
            _all_done.emplace();
            co_await _all_done->get_future();
        }
        try {
            co_await _link->close();
        } catch (...) {
            rpc_log.debug("closing connection to {}: {}", peer(), std::current_exception());
        }
        --_shared->stats.connections_open;
        _finished = true;
        _shared->connections.erase(self);
    }

    /// Stop reading requests (the running calls still reply); the tracker shuts input down.
    void stop_reading() noexcept {
        _stopped = true;
        _in_flight.broken();
        if (!_tracked) {
            _link->shutdown_input();
        }
    }
    /// Breaks the connection now; running calls' replies are dropped.
    void abort() noexcept {
        if (!_tracked && !_finished && !_aborted) {
            ++_shared->links_aborted;
        }
        _aborted = true;
        _stopped = true;
        _link->abort();
        _link->abort_output(std::make_exception_ptr(connection_error("server stopped")));
        _in_flight.broken();
        if (_all_done) {
            std::exchange(_all_done, std::nullopt)->set_value();
        }
    }

private:
    std::string peer() const {
        try {
            return _link->peer_address().to_string();
        } catch (...) {
            return "?";
        }
    }

    /// Reads requests until the link's end (clean, an error, or input shut at stop).
    /// Back-pressure: a request is taken only when this connection and the server have room for
    /// another call and the client reads its replies; the units for the next request are
    /// reserved before the link may hand it over, and the link is paused while they are not.
    future<> read_requests() {
        _reading_ended.emplace();
        future<> ended = _reading_ended->get_future();
        const bool room = reserve_now();
        if (!room) {
            _link->pause_reading();
        }
        _link->read_frames_into(*this, _shared->options.max_frame_size);
        if (!room) {
            (void)wait_for_room();
        }
        return ended;
    }

    /// Reserves the next request's units and checks the reply queue, without waiting; false
    /// when something has no room (what could be reserved stays reserved).
    bool reserve_now() noexcept {
        if (_stopped || _link->failed() || _shared->stopping) {
            return false;
        }
        if (!_next_conn_unit.count()) {
            if (!_in_flight.try_wait(1)) {
                return false;
            }
            _next_conn_unit = semaphore_units(_in_flight, 1);
        }
        if (!_next_server_unit.count()) {
            if (!_shared->in_flight.try_wait(1)) {
                return false;
            }
            _next_server_unit = semaphore_units(_shared->in_flight, 1);
        }
        return _link->queued_bytes() < _shared->options.max_queued_reply_bytes;
    }

    /// The link is paused: waits for room, then resumes it. When reading is to stop instead
    /// (stop, a failed link), the link's input is shut and it reads on to its end.
    future<> wait_for_room() {
        auto keep = shared_from_this();
        const size_t limit = _shared->options.max_queued_reply_bytes;
        try {
            while (!reserve_now()) {
                if (_stopped || _link->failed() || _shared->stopping) {
                    throw connection_error("stopped reading");
                }
                if (!_next_conn_unit.count()) {
                    co_await _in_flight.wait(1);
                    _next_conn_unit = semaphore_units(_in_flight, 1);
                } else if (!_next_server_unit.count()) {
                    co_await _shared->in_flight.wait(1);
                    _next_server_unit = semaphore_units(_shared->in_flight, 1);
                } else {
                    co_await _link->wait_below(limit);
                }
            }
        } catch (...) {
            stop_taking_requests();
            co_return;
        }
        if (_reading_ended) {
            _link->resume_reading();
        }
    }

    /// No more requests are dispatched: the input is shut, and the link (resumed) reads on to
    /// its end, which ends `read_requests`.
    void stop_taking_requests() noexcept {
        _stopped = true;
        _next_conn_unit.return_all();
        _next_server_unit.return_all();
        if (_reading_ended) {
            _link->shutdown_input();
            _link->resume_reading();
        }
    }

    /// A request from the link (its units were reserved before the link could hand it over).
    void on_frame(frame&& f) override {
        if (_stopped) {
            return; // reading is stopping: dropped, as an unread request was before
        }
        dispatch(std::move(f));
        if (_next_server_unit.count() && _shared->in_flight.waiters() > 0) {
            // The call finished at once and kept its server unit: other connections wait for
            // one, so it goes back to them (in order) instead of to this connection's next call.
            _next_server_unit.return_all();
        }
        if (!reserve_now()) {
            _link->pause_reading();
            (void)wait_for_room();
        }
    }

    /// The link's reading ended: `read_requests` resolves (or fails) with why.
    void on_end(std::exception_ptr why) noexcept override {
        _stopped = true;
        _next_conn_unit.return_all();
        _next_server_unit.return_all();
        if (auto done = std::exchange(_reading_ended, std::nullopt)) {
            if (why) {
                done->set_exception(std::move(why));
            } else {
                done->set_value();
            }
        }
    }

    /// Runs the call `f`. A handler that has not answered yet takes the reserved units
    /// (`_next_conn_unit`, `_next_server_unit`) until it does; a call finished at once leaves
    /// them reserved for the next request.
    void dispatch(frame f) {
        auto& h = f.header;
        if (h.type != frame_type::request && h.type != frame_type::one_way) {
            throw protocol_error("a server received a frame of type " + std::to_string(int(h.type)));
        }
        ++_shared->stats.calls;
        bool one_way = h.type == frame_type::one_way;
        uint64_t id = h.request_id;
        auto it = _shared->handlers.find(h.verb);
        if (it == _shared->handlers.end()) {
            reply_error(one_way, id, frame_type::unknown_verb, "rpc::unknown_verb_error",
                        "no handler for verb " + std::to_string(h.verb));
            return;
        }
        const auto& e = it->second;
        if (e.signature != h.signature) {
            reply_error(one_way, id, frame_type::bad_signature, "rpc::signature_mismatch_error",
                        "the caller's declaration of " + e.name +
                            " has other argument or result types than the server's");
            return;
        }
        ++_running;
        ++_shared->stats.calls_in_flight;
        auto started = steady_clock_type::now();
        future<outgoing_frame> done = e.invoke(e.object, std::move(f));
        if (done.available()) {
            // A handler that answered at once (the usual small call): finished here, without
            // a continuation, and its units stay reserved for the next request.
            finish_call(done, one_way, id, started);
            return;
        }
        (void)std::move(done).then_wrapped(
            [self = shared_from_this(), one_way, id, started, cu = std::move(_next_conn_unit),
             su = std::move(_next_server_unit)](future<outgoing_frame> done) mutable {
                self->finish_call(done, one_way, id, started);
            });
    }

    /// Replies with the handler's outcome `done` (ready), which took since `started`, and
    /// counts the call as finished.
    void finish_call(future<outgoing_frame>& done, bool one_way, uint64_t id,
                     steady_clock_type::time_point started) {
        _shared->handler_seconds.observe(
            std::chrono::duration<double>(steady_clock_type::now() - started).count());
        --_shared->stats.calls_in_flight;
        if (done.failed()) {
            auto [type, message] = describe(done.get_exception());
            if (one_way) {
                rpc_log.debug("one-way call failed: {}: {}", type, message);
            } else {
                reply_error(false, id, frame_type::error, type, message);
            }
        } else if (!one_way) {
            send(done.get(), id);
        } else {
            done.ignore_ready_future();
        }
        if (--_running == 0 && _all_done) {
            std::exchange(_all_done, std::nullopt)->set_value();
        }
    }

    void reply_error(bool one_way, uint64_t id, frame_type type, const std::string& name,
                     const std::string& message) {
        ++_shared->stats.errors_returned;
        if (!one_way) {
            send(make_frame(type, name, message), id);
        }
    }

    void send(outgoing_frame&& f, uint64_t id) {
        f.header.request_id = id;
        if (f.header.payload_size + size_t(f.header.attachment_size) > _shared->options.max_frame_size) {
            auto err = make_frame(frame_type::error, std::string("rpc::protocol_error"),
                                  std::string("the reply is over the server's frame size limit"));
            err.header.request_id = id;
            f = std::move(err);
        }
        _link->send(std::move(f));
        auto& max = _shared->stats.max_queued_reply_bytes;
        max = std::max<uint64_t>(max, _link->queued_bytes());
    }

    std::shared_ptr<server_shared> _shared;
    std::unique_ptr<link> _link;
    semaphore _in_flight;
    bool _tracked;
    bool _finished = false;
    bool _aborted = false;
    bool _stopped = false; // no more requests are taken (stop, abort, the link's end)
    unsigned _running = 0;
    semaphore_units _next_conn_unit;         // reserved for the next request
    semaphore_units _next_server_unit;       // reserved for the next request
    std::optional<promise<>> _reading_ended; // resolved by `on_end`
    std::optional<promise<>> _all_done;
};

} // namespace detail

namespace detail {
/// Serves `l` on `shared`'s server until it closes or the server stops.
future<> serve_link(const std::shared_ptr<server_shared>& shared, std::unique_ptr<link> l, bool tracked) {
    auto c = std::make_shared<server_connection>(shared, std::move(l), tracked);
    auto it = shared->connections.insert(shared->connections.end(), c);
    ++shared->stats.connections_accepted;
    return c->run(it);
}
} // namespace detail

/// The RDMA message path's listener and the connections accepted from it. Its loops use only
/// this and the shared state, so a server destroyed without `stop()` can leave it behind.
struct server::rdma_listening {
    net::rdma::listener listener;
    gate conns;
    std::optional<future<>> accepting;
    std::shared_ptr<detail::server_shared> shared;
    bool stopped = false;

    void serve(std::unique_ptr<link> l) {
        if (stopped) {
            l->abort();
            return;
        }
        conns.enter();
        (void)detail::serve_link(shared, std::move(l), false)
            .handle_exception([](std::exception_ptr ex) { rpc_log.debug("connection ended: {}", ex); })
            .finally([this] { conns.leave(); });
    }

    future<> accept_loop() {
        for (;;) {
            net::rdma::connection c;
            try {
                c = co_await listener.accept();
            } catch (...) {
                if (!stopped) {
                    rpc_log.warn("RDMA accept failed: {}", std::current_exception());
                }
                co_return;
            }
            try {
                const server_options& o = shared->options;
                serve(rdma_link(std::move(c), o.rdma));
            } catch (...) {
                rpc_log.warn("cannot serve an RDMA connection: {}", std::current_exception());
            }
        }
    }
};

server::server(net::transport t, server_options o)
    : _transport(std::move(t))
    , _shared(std::make_shared<detail::server_shared>(o)) {}

server::server(server_options o)
    : _shared(std::make_shared<detail::server_shared>(o)) {}

server::~server() {
    // Without stop() the tracker's serve functions would outlive it: cut what is left (stop()
    // has normally emptied the list already).
    abort_connections();
    if (_rdma && !_rdma->conns.is_closed()) {
        // Never stopped: the accept loop and the serve functions still run on it, so it is left
        // to them (a leak, for a server destroyed against the contract).
        _rdma->stopped = true;
        if (_rdma->accepting) {
            _rdma->listener.abort_accept();
        }
        _rdma.release();
    }
}

void server::abort_connections() noexcept {
    auto conns = _shared->connections; // copies: connections remove themselves when done
    for (auto& c : conns) {
        c->abort();
    }
}

void server::add_entry(uint64_t id, handler_entry e) {
    auto [it, fresh] = _shared->handlers.try_emplace(id, e);
    if (!fresh) {
        throw duplicate_verb_error("rpc: verb id " + std::to_string(id) + " of " + e.name +
                                   " is already taken by " + it->second.name);
    }
}

const metrics::histogram& server::handler_latency() const noexcept {
    return _shared->handler_seconds;
}

server_stats server::stats() const noexcept {
    server_stats st = _shared->stats;
    st.connections_aborted = _conns.aborted() + _shared->links_aborted;
    return st;
}

const server_options& server::options() const noexcept {
    return _shared->options;
}

void server::listen(const net::socket_address& addr, net::listen_options opts) {
    if (!_transport.listen) {
        throw std::logic_error("rpc::server::listen: this server was made without a transport");
    }
    if (_transport.name == "rdma" && _shared->options.rdma_messages) {
        make_rdma();
        _rdma->listener = net::rdma::listen_rc(addr);
        _rdma->accepting = _rdma->accept_loop();
        return;
    }
    opts.reuse_port = true;
    _listener = _transport.listen(addr, opts);
    _conns.accept_from(_listener, [this](net::connected_socket s) { return serve_connection(std::move(s)); });
}

void server::serve(net::connected_socket s) {
    // Once stopping, the tracker drops the connection.
    _conns.add(std::move(s), [this](net::connected_socket c) { return serve_connection(std::move(c)); });
}

net::socket_address server::local_address() const {
    return _rdma ? _rdma->listener.local_address() : _listener.local_address();
}

void server::make_rdma() {
    if (!_rdma) {
        _rdma = std::make_unique<rdma_listening>();
        _rdma->shared = _shared;
        _rdma->stopped = _stopped;
    }
}

void server::serve(std::unique_ptr<link> l) {
    make_rdma();
    _rdma->serve(std::move(l));
}

future<> server::serve_connection(net::connected_socket s) {
    s.set_nodelay(true);
    return detail::serve_link(_shared, stream_link(std::move(s)), true);
}

future<> server::stop() {
    if (_stopped) {
        co_return;
    }
    _stopped = true;
    _shared->stopping = true;
    _shared->in_flight.broken(std::make_exception_ptr(connection_error("server stopping")));
    for (auto& c : _shared->connections) {
        c->stop_reading();
    }
    // The tracker shuts input down, waits stop_timeout, then aborts the sockets. rpc aborts its
    // side of each connection left at the same deadline (net::server_connections has no abort
    // hook), so that a serve function waiting for a handler that never finishes returns. The
    // timer is armed after the tracker's, so the tracker aborts (and counts) first.
    auto done = _conns.stop(_shared->options.stop_timeout);
    timer<> deadline([this] { abort_connections(); });
    deadline.arm(_shared->options.stop_timeout);
    if (_rdma) {
        // The RDMA message path: no tracker; accepting stops now, each connection's input was
        // shut above, and the same deadline aborts the connections left.
        _rdma->stopped = true;
        if (_rdma->accepting) {
            _rdma->listener.abort_accept();
            co_await std::move(*_rdma->accepting);
        }
        co_await _rdma->conns.close();
    }
    co_await std::move(done);
    deadline.cancel();
    if (_conns.aborted() > 0) {
        rpc_log.info("stop: aborted {} connections still busy after {} ms", _conns.aborted(),
                     _shared->options.stop_timeout.count());
    }
}

} // namespace shoal::rpc
