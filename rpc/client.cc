#include "rpc/client.hh"

#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "core/log.hh"
#include "net/rdma/connection.hh"
#include "rpc/client_stats.hh"
#include "rpc/rdma_link.hh"

namespace shoal::rpc {

namespace {
logger client_log("rpc-client");
} // namespace

namespace detail {

/// A client's connection and its calls. It is its link's frame sink: replies are matched to
/// their calls as the link completes them (over RDMA inside the receive completion).
class client_state final : public std::enable_shared_from_this<client_state>, private frame_sink {
public:
    explicit client_state(client_options o)
        : options(o)
        , slots_free(o.max_in_flight) {}

    /// One call waiting for its reply. Slots are reused; the generation in the request id
    /// tells a late reply (after a timeout) from the current call.
    struct slot {
        pending_call* call = nullptr; // the caller; null while the slot is free
        timer<> expiry;
        steady_clock_type::time_point sent; // for the latency histogram
        uint32_t generation = 0;
    };

    client_options options;
    std::unique_ptr<link> conn; // the connection (frames out; the read loop reads frames in)
    std::deque<slot> slots;
    std::vector<uint32_t> free_slots;
    semaphore slots_free;
    size_t pending = 0;
    std::exception_ptr down; // why the connection is unusable (null while connected)
    bool attached = false;
    std::optional<promise<>> reader_done;
    std::optional<promise<>> idle; // close()'s wait for the pending calls
    bool reading = false;
    std::shared_ptr<client_state> reading_hold; // the state lives while its link reads into it

    void attach(std::unique_ptr<link> l) {
        conn = std::move(l);
        conn->set_nodelay();
        attached = true;
        reading = true;
        reading_hold = shared_from_this();
        conn->read_frames_into(*this, options.max_frame_size);
    }

    ~client_state() {
        // (Every way out fails the pending calls first; this is for a state dropped without.)
        for (auto& s : slots) {
            if (s.call) {
                std::exchange(s.call, nullptr)
                    ->fail(std::make_exception_ptr(connection_error("rpc::client destroyed")));
            }
        }
    }

    /// Takes a free slot for `c` (the caller holds a unit of `slots_free`); returns its
    /// request id.
    uint64_t take_slot(pending_call* c) {
        uint32_t index;
        if (!free_slots.empty()) {
            index = free_slots.back();
            free_slots.pop_back();
        } else {
            index = uint32_t(slots.size());
            auto& s = slots.emplace_back();
            s.expiry.set_callback([this, index] { expire(index); });
        }
        auto& s = slots[index];
        s.call = c;
        ++pending;
        return (uint64_t(s.generation) << 32) | index;
    }

    /// Sends `f` as call `c` in a new slot (the caller holds a unit of `slots_free`); the slot
    /// resolves `c`.
    void start_call(outgoing_frame&& f, steady_clock_type::time_point deadline, pending_call* c) noexcept {
        uint64_t id;
        try {
            id = take_slot(c);
        } catch (...) {
            slots_free.signal(1);
            c->fail(std::current_exception());
            return;
        }
        auto& cs = local_client_stats();
        ++cs.calls;
        ++cs.in_flight;
        auto& s = slots[uint32_t(id)];
        try {
            if (deadline != steady_clock_type::time_point::max()) {
                s.expiry.arm(deadline);
            }
            f.header.request_id = id;
            cs.sent_bytes += f.wire_size();
            s.sent = steady_clock_type::now();
            conn->send(std::move(f));
        } catch (...) {
            ++cs.errors;
            std::exchange(s.call, nullptr)->fail(std::current_exception());
            release_slot(uint32_t(id));
        }
    }

    /// Frees slot `index` (its call already resolved).
    void release_slot(uint32_t index) noexcept { release_slot(index, slots[index]); }
    /// Frees slot `index`, which is `s`.
    void release_slot(uint32_t index, slot& s) noexcept {
        s.expiry.cancel();
        ++s.generation;
        free_slots.push_back(index);
        --pending;
        --local_client_stats().in_flight;
        slots_free.signal(1);
        if (pending == 0 && idle) {
            std::exchange(idle, std::nullopt)->set_value();
        }
    }

    /// Resolves when no call waits for its reply.
    future<> wait_idle() {
        if (pending == 0) {
            return make_ready_future<>();
        }
        idle.emplace(); // an earlier waiter (a close that timed out) is dropped
        return idle->get_future();
    }

    void expire(uint32_t index) noexcept {
        auto& s = slots[index];
        if (s.call) {
            auto& cs = local_client_stats();
            ++cs.errors;
            ++cs.timeouts;
            std::exchange(s.call, nullptr)
                ->fail(std::make_exception_ptr(timeout_error("rpc call timed out")));
            release_slot(index);
        }
    }

    void complete(frame&& f) {
        uint64_t id = f.header.request_id;
        uint32_t index = uint32_t(id);
        if (index >= slots.size()) {
            return; // not an id this client gave
        }
        slot& s = slots[index];
        if (!s.call || s.generation != uint32_t(id >> 32)) {
            return; // the call timed out: its late reply is dropped
        }
        auto& cs = local_client_stats();
        ++cs.replies;
        cs.errors += f.header.type != frame_type::response;
        cs.latency.observe(std::chrono::duration<double>(steady_clock_type::now() - s.sent).count());
        std::exchange(s.call, nullptr)->complete(std::move(f));
        release_slot(index, s);
    }

    /// Marks the connection down and fails every pending call with `why`.
    void fail_all(std::exception_ptr why) noexcept {
        if (!down) {
            down = why;
        }
        slots_free.broken(down);
        for (uint32_t i = 0; i < slots.size(); ++i) {
            if (slots[i].call) {
                ++local_client_stats().errors;
                std::exchange(slots[i].call, nullptr)->fail(down);
                release_slot(i);
            }
        }
        if (conn) {
            conn->abort_output(down);
        }
    }

    /// A reply from the link.
    void on_frame(frame&& f) override {
        if (f.header.type < frame_type::response) {
            throw protocol_error("a client received a request frame");
        }
        complete(std::move(f));
    }

    /// The link stopped reading: every pending call fails, in a task of its own (this may run
    /// inside the link's receive completion).
    void on_end(std::exception_ptr why) noexcept override {
        (void)yield().then([this, why = std::move(why)]() mutable { return finish_reading(std::move(why)); });
    }

    /// After reading ended: fails the calls with why it ended and closes the link.
    future<> finish_reading(std::exception_ptr why) {
        std::shared_ptr<client_state> keep = std::move(reading_hold);
        if (!why) {
            why = std::make_exception_ptr(connection_error("connection closed by the server"));
        } else {
            try {
                std::rethrow_exception(why);
            } catch (const protocol_error& e) {
                client_log.warn("closing connection: {}", e.what());
                why = std::make_exception_ptr(
                    connection_error(std::string("protocol error from the server: ") + e.what()));
            } catch (...) {
                why = std::make_exception_ptr(
                    connection_error(fmt::format("connection lost: {}", std::current_exception())));
            }
        }
        fail_all(why);
        conn->abort();
        try {
            co_await conn->close(); // the conn's loop is done before the state can go
        } catch (...) {
        }
        reading = false;
        if (reader_done) {
            std::exchange(reader_done, std::nullopt)->set_value();
        }
    }

    future<> wait_reader() {
        if (!reading) {
            return make_ready_future<>();
        }
        reader_done.emplace();
        return reader_done->get_future();
    }
};

} // namespace detail

client::client(net::transport t, client_options o)
    : _transport(std::move(t))
    , _state(std::make_shared<detail::client_state>(o)) {}

client::client(client&&) noexcept = default;
client& client::operator=(client&&) noexcept = default;

client::~client() {
    if (_state) {
        abort();
    }
}

future<> client::connect(net::socket_address addr) {
    if (_state->attached) {
        throw std::logic_error("rpc::client::connect: already connected");
    }
    std::unique_ptr<link> l;
    try {
        if (_transport.name == "rdma" && _state->options.rdma_messages) {
            net::rdma::connection c = co_await net::rdma::connect_rc(addr);
            const client_options& o = _state->options;
            l = rdma_link(std::move(c), o.rdma);
        } else {
            l = stream_link(co_await _transport.connect(addr));
        }
    } catch (...) {
        throw connection_error(
            fmt::format("cannot connect to {}: {}", addr.to_string(), std::current_exception()));
    }
    attach(std::move(l));
}

void client::attach(net::connected_socket s) {
    _state->attach(stream_link(std::move(s)));
}

void client::attach(std::unique_ptr<link> l) {
    _state->attach(std::move(l));
}

bool client::connected() const noexcept {
    return _state && _state->attached && !_state->down;
}

size_t client::in_flight() const noexcept {
    return _state ? _state->pending : 0;
}

steady_clock_type::time_point client::default_deadline() const noexcept {
    if (_state->options.timeout.count() == 0) {
        return steady_clock_type::time_point::max();
    }
    return steady_clock_type::now() + _state->options.timeout;
}

void client::check_reply(const frame& reply) {
    if (reply.header.type == frame_type::response) {
        return;
    }
    reader r(reply.payload.view());
    auto [type, message] = deserialize<std::pair<std::string, std::string>>(r);
    switch (reply.header.type) {
    case frame_type::unknown_verb:
        throw unknown_verb_error(std::move(type), message);
    case frame_type::bad_signature:
        throw signature_mismatch_error(std::move(type), message);
    case frame_type::error:
        throw remote_error(std::move(type), message);
    default:
        throw protocol_error("unexpected reply frame type " + std::to_string(int(reply.header.type)));
    }
}

namespace {

/// A call that must wait for a free slot first.
future<> roundtrip_after_slot(std::shared_ptr<detail::client_state> st, outgoing_frame f,
                              steady_clock_type::time_point deadline, detail::pending_call* c) {
    try {
        if (deadline == steady_clock_type::time_point::max()) {
            co_await st->slots_free.wait(1);
        } else {
            try {
                co_await st->slots_free.wait(deadline, 1);
            } catch (const semaphore_timed_out&) {
                throw timeout_error("rpc call timed out waiting for a free slot");
            }
        }
    } catch (...) {
        c->fail(std::current_exception());
        co_return;
    }
    if (st->down) {
        st->slots_free.signal(1);
        c->fail(st->down);
        co_return;
    }
    st->start_call(std::move(f), deadline, c);
}

} // namespace

void client::roundtrip(outgoing_frame&& f, steady_clock_type::time_point deadline,
                       detail::pending_call* c) noexcept {
    auto& st = *_state;
    try {
        if (!st.attached) {
            throw connection_error("rpc::client is not connected");
        }
        if (f.header.body_size() > st.options.max_frame_size) {
            throw protocol_error("call of " + std::to_string(f.header.body_size()) +
                                 " bytes over the frame size limit");
        }
        if (st.down) {
            std::rethrow_exception(st.down);
        }
        // The common case, a free slot, allocates no coroutine.
        if (!st.slots_free.try_wait(1)) {
            (void)roundtrip_after_slot(_state, std::move(f), deadline, c);
            return;
        }
    } catch (...) {
        c->fail(std::current_exception()); // (or no memory for the coroutine)
        return;
    }
    st.start_call(std::move(f), deadline, c);
}

future<> client::send_one_way(outgoing_frame f) {
    auto& st = *_state;
    if (!st.attached) {
        return make_exception_future<>(connection_error("rpc::client is not connected"));
    }
    if (st.down) {
        return make_exception_future<>(st.down);
    }
    if (f.header.body_size() > st.options.max_frame_size) {
        return make_exception_future<>(protocol_error("call over the frame size limit"));
    }
    auto& cs = local_client_stats();
    ++cs.one_way;
    cs.sent_bytes += f.wire_size();
    st.conn->send(std::move(f));
    return make_ready_future<>();
}

future<> client::close() {
    auto st = _state;
    if (!st->attached) {
        co_return;
    }
    if (!st->down) {
        // Let the replies of calls already sent arrive (bounded), then end the stream.
        auto deadline = steady_clock_type::now() + st->options.close_timeout;
        try {
            co_await with_timeout(deadline, st->wait_idle());
            co_await with_timeout(deadline, st->conn->close());
            co_await with_timeout(deadline, st->wait_reader());
        } catch (...) {
        }
    }
    st->fail_all(std::make_exception_ptr(connection_error("rpc::client closed")));
    st->conn->abort();
    co_await st->wait_reader();
    if (st->conn) {
        co_await st->conn->close();
    }
}

void client::abort() noexcept {
    auto& st = *_state;
    if (st.attached) {
        st.fail_all(std::make_exception_ptr(connection_error("rpc::client aborted")));
        st.conn->abort();
    }
}

} // namespace shoal::rpc
