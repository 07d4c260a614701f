// shoal_ring_*: the RDMA ring channel (net/rdma/services/ring_channel.hh) behind the C ABI. A consumer
// lives on one shard with its ring, a listener and the connection of its producer; a producer
// lives on one shard with its connection. Every call is handed to that shard.

#include "capi/async.hh"
#include "capi/buffer.hh"
#include "capi/shard_handle.hh"
#include "capi/status.hh"
#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "net/rdma/connection.hh"
#include "net/rdma/context.hh"
#include "net/rdma/services/ring_channel.hh"
#include "net/socket_address.hh"
#include "shoal/shoal_c.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

using namespace shoal;
using namespace shoal::capi;
namespace rdma = shoal::net::rdma;

namespace {

/// "SHRDESC1": the first 8 bytes of a descriptor made by shoal_ring_consumer_descriptor.
constexpr uint64_t descriptor_magic = 0x3143534544524853ULL;

/// A descriptor's bytes: magic, ring address, rkey, 4 reserved bytes (0), ring length; all
/// little-endian (the byte order of the machines shoal runs on).
struct wire_descriptor {
    uint64_t magic;
    uint64_t addr;
    uint32_t rkey;
    uint32_t reserved;
    uint64_t length;
};
static_assert(sizeof(wire_descriptor) == SHOAL_RING_DESCRIPTOR_SIZE);

/// The deadline of a receive that waits `timeout_ms` (negative: none).
std::optional<steady_clock_type::time_point> deadline_of(int timeout_ms) {
    if (timeout_ms < 0) {
        return std::nullopt;
    }
    return steady_clock_type::now() + std::chrono::milliseconds(timeout_ms);
}

/// Connection options of the calling shard with connection setup bounded by `timeout_ms`.
rdma::connection_options connect_options(unsigned timeout_ms) {
    rdma::connection_options o = rdma::shard_context::local().opts().connection;
    if (timeout_ms) {
        o.connect_timeout = std::chrono::milliseconds(timeout_ms);
        o.resolve_timeout = std::min(o.resolve_timeout, std::chrono::milliseconds(timeout_ms));
    }
    return o;
}

/// A consumer: the ring, its listener, the message handed out and not yet released.
class consumer_state final : public shard_handle {
public:
    using shard_handle::shard_handle;

    /// Creates the ring and listens (on the shard).
    void open_on_shard(const net::socket_address& addr, size_t capacity) {
        _ring = rdma::ring_consumer(capacity);
        rdma::listen_options lo;
        lo.connection = rdma::shard_context::local().opts().connection;
        lo.connection->region = _ring.descriptor();
        _listener.emplace(rdma::listen_rc(addr, lo));
        _address = _listener->local_address().to_string();
        _descriptor = _ring.descriptor();
        _max_message = _ring.max_message_size();
        _ring.notify(&consumer_state::on_notify, this);
        _accepting = accept_loop(std::static_pointer_cast<consumer_state>(shared_from_this()));
    }

    const std::string& address() const noexcept { return _address; }
    const rdma::remote_region& descriptor() const noexcept { return _descriptor; }
    size_t max_message() const noexcept { return _max_message; }

    /// The next message (the one held back by a too-small buffer first), waiting until
    /// `deadline`. One wait at a time (std::logic_error otherwise).
    future<std::span<const char>> next(std::optional<steady_clock_type::time_point> deadline) {
        if (_receiving) {
            throw std::logic_error("a receive on this ring consumer is already waiting");
        }
        _receiving = true;
        return wait(deadline).finally([this] { _receiving = false; });
    }

    /// Marks the message just handed out as viewed: the next receive releases it.
    void viewed() noexcept { _viewed = true; }
    /// Gives the held message's space back to the producer.
    void consume() noexcept {
        _held.reset();
        _viewed = false;
        if (_ring) {
            _ring.release();
        }
    }

private:
    future<std::span<const char>> wait(std::optional<steady_clock_type::time_point> deadline) {
        for (;;) {
            if (_shut) {
                throw closed_error("the ring consumer is closed");
            }
            if (auto m = take()) {
                co_return *m;
            }
            // A broken connection ends one receive; later ones wait for a producer that
            // connects again (a new connection's doorbells may arrive before it is attached).
            if (auto e = _ring.error(); e && e != _reported) {
                _reported = e;
                std::rethrow_exception(e);
            }
            if (_accept_error) {
                std::rethrow_exception(_accept_error);
            }
            if (deadline && steady_clock_type::now() >= *deadline) {
                throw timed_out_error();
            }
            _wake.emplace(); // an earlier promise (a timed-out wait's) is dropped here
            future<> woken = _wake->get_future();
            if (deadline) {
                woken = with_timeout(*deadline, std::move(woken));
            }
            try {
                co_await std::move(woken);
            } catch (const timed_out_error&) {
                // checked at the top of the loop, after one more look at the ring
            }
        }
    }

    /// The held message when it was not viewed yet (a too-small buffer refused it), else the
    /// next message of the ring (releasing the viewed one first).
    std::optional<std::span<const char>> take() {
        if (_held) {
            if (!_viewed) {
                return _held;
            }
            consume();
        }
        auto m = _ring.try_receive();
        if (m) {
            _held = m;
            _viewed = false;
        }
        return m;
    }

    void wake() noexcept {
        if (_wake) {
            auto pr = std::move(*_wake);
            _wake.reset();
            pr.set_value();
        }
    }

    static void on_notify(void* self) noexcept { static_cast<consumer_state*>(self)->wake(); }

    /// Attaches every producer connection that arrives while the previous one is broken; turns
    /// away a second one while the first works.
    static future<> accept_loop(std::shared_ptr<consumer_state> self) {
        while (!self->_shut) {
            rdma::connection c;
            try {
                c = co_await self->_listener->accept();
            } catch (...) {
                if (!self->_shut) {
                    self->_accept_error = std::current_exception();
                    self->wake();
                }
                co_return;
            }
            if (self->_shut) {
                c.close();
                co_return;
            }
            try {
                self->_ring.attach(c);
            } catch (const std::logic_error&) {
                c.close(); // a second producer while the first one's connection works
            }
            self->wake();
        }
    }

    future<> close_on_shard() noexcept override {
        _shut = true;
        if (_listener) {
            _listener->abort_accept();
        }
        wake();
        _held.reset();
        if (_ring) {
            _ring.notify(nullptr, nullptr);
        }
        _ring = rdma::ring_consumer(); // closes the producer's connection, revokes the ring
        return std::move(_accepting).then_wrapped([this](future<> f) {
            f.ignore_ready_future();
            _listener.reset();
        });
    }

    void abandon() noexcept override {
        // The shards are gone: nothing of theirs may be touched or destroyed here.
        (void)new rdma::ring_consumer(std::move(_ring));
        (void)new std::optional<rdma::listener>(std::move(_listener));
        (void)new future<>(std::move(_accepting));
    }

    rdma::ring_consumer _ring;
    std::optional<rdma::listener> _listener;
    future<> _accepting = make_ready_future<>();
    std::exception_ptr _accept_error;
    std::exception_ptr _reported; // the connection error a receive already failed with
    std::optional<promise<>> _wake;
    std::optional<std::span<const char>> _held; // handed out (or refused as too large), not released
    bool _viewed = false;
    bool _receiving = false;
    bool _shut = false;
    std::string _address;
    rdma::remote_region _descriptor;
    size_t _max_message = 0;
};

/// A producer and its connection.
class producer_state final : public shard_handle {
public:
    using shard_handle::shard_handle;

    /// Connects and opens the producer (on the shard).
    future<> open_on_shard(net::socket_address addr, rdma::remote_region ring, unsigned timeout_ms) {
        rdma::connection c = co_await rdma::connect_rc(addr, connect_options(timeout_ms));
        _producer = co_await rdma::ring_producer::open(c, ring);
        _max_message = _producer.max_message_size();
        _resume_record = _producer.resume_record();
    }

    size_t max_message() const noexcept { return _max_message; }
    uint64_t resume_record() const noexcept { return _resume_record; }

    /// Sends `msg` (kept valid by the caller until the future resolves).
    future<> send(std::span<const char> msg) { return live().send(msg); }

    /// Writes `msgs` in order and flushes once, so they share doorbells: resolves once all are
    /// in the consumer's memory (keep the bytes valid until then). Every record is handed to
    /// the producer before anything waits (write() keeps call order, also for records that wait
    /// for room), so a later send or send_many on the shard never comes between them.
    static future<> send_many(std::shared_ptr<producer_state> self, std::vector<std::span<const char>> msgs) {
        rdma::ring_producer& p = self->live();
        std::vector<future<>> waiting; // writes not taken at once (the ring was full)
        for (std::span<const char> m : msgs) {
            future<> w = p.write(m);
            if (!w.available() || w.failed()) {
                waiting.push_back(std::move(w));
            }
        }
        waiting.push_back(p.flush());
        co_await when_all_succeed(std::move(waiting));
        (void)self; // held until every write resolved
    }

private:
    /// The producer, or closed_error once closed (also between the writes of a send_many).
    rdma::ring_producer& live() {
        if (!_producer) {
            throw closed_error("the ring producer is closed");
        }
        return _producer;
    }

    future<> close_on_shard() noexcept override {
        _producer = rdma::ring_producer(); // closes the connection; queued sends fail
        return make_ready_future<>();
    }

    void abandon() noexcept override { (void)new rdma::ring_producer(std::move(_producer)); }

    rdma::ring_producer _producer;
    size_t _max_message = 0;
    uint64_t _resume_record = 0;
};

/// An address given by the caller, parsed (std::invalid_argument naming it when bad).
net::socket_address parse_address(const char* address) {
    return net::socket_address::parse(address);
}

} // namespace

/// The C handles.
struct shoal_ring_consumer {
    std::shared_ptr<consumer_state> state;
};
struct shoal_ring_producer {
    std::shared_ptr<producer_state> state;
};

namespace {

int check(const shoal_ring_consumer* c, const char* what, bool blocking) {
    return check_handle(c ? c->state.get() : nullptr, what, "ring consumer", blocking);
}

int check(const shoal_ring_producer* p, const char* what, bool blocking) {
    return check_handle(p ? p->state.get() : nullptr, what, "ring producer", blocking);
}

/// The checks of opening a ring handle on `shard` of `rt`.
int check_open(shoal_runtime* rt, unsigned shard, const char* address, const char* what) {
    if (int rc = check_rdma_shard(rt, shard, what); rc != SHOAL_OK) {
        return rc;
    }
    if (!address) {
        return fail(SHOAL_EINVAL, std::string(what) + ": NULL address");
    }
    check_blocking_allowed();
    return SHOAL_OK;
}

/// A blocking receive: `on_message(state, message)` runs on the shard and yields the status.
template <typename OnMessage>
int receive(shoal_ring_consumer* c, int timeout_ms, const char* what, OnMessage on_message) {
    if (int rc = check(c, what, true); rc != SHOAL_OK) {
        return rc;
    }
    auto st = c->state;
    auto f = st->runtime().engine().submit(st->shard(), [st, timeout_ms, on_message]() {
        return st->next(deadline_of(timeout_ms)).then([st, on_message](std::span<const char> m) {
            return on_message(*st, m);
        });
    });
    auto [rc, text] = f.get();
    return rc == SHOAL_OK ? rc : fail(rc, std::string(what) + ": " + text);
}

/// SHOAL_EINVAL (saying so) when a message of `size` bytes exceeds the ring of `st`.
int check_size(const producer_state& st, size_t size, const char* what) {
    if (size > st.max_message()) {
        return fail(SHOAL_EINVAL, std::string(what) + ": a message of " + std::to_string(size) +
                                      " bytes exceeds the ring's largest of " +
                                      std::to_string(st.max_message()));
    }
    return SHOAL_OK;
}

/// A send of `size` bytes: checked here, `fn(state)` returning its future runs on the shard.
template <typename Fn>
int blocking_send(shoal_ring_producer* p, size_t size, const char* what, Fn fn) {
    if (int rc = check(p, what, true); rc != SHOAL_OK) {
        return rc;
    }
    auto st = p->state;
    if (int rc = check_size(*st, size, what); rc != SHOAL_OK) {
        return rc;
    }
    st->runtime().engine().submit(st->shard(), [st, fn] { return fn(*st); }).get();
    return SHOAL_OK;
}

/// The _async form of a send (see blocking_send).
template <typename Fn>
int async_send(shoal_ring_producer* p, size_t size, shoal_done_cb done, const char* what, Fn fn, void* user) {
    if (int rc = check(p, what, false); rc != SHOAL_OK) {
        return rc;
    }
    if (!done) {
        return fail(SHOAL_EINVAL, std::string(what) + ": NULL callback");
    }
    auto st = p->state;
    if (int rc = check_size(*st, size, what); rc != SHOAL_OK) {
        return rc;
    }
    return start_async_done(st, what, std::move(fn), done, user);
}

/// The checks of a send_many of `count` messages (`data[i]`, `sizes[i]` bytes): the arrays, and
/// every message against the ring before anything is sent. The largest size through `largest`.
int check_many(size_t count, const void* const* data, const size_t* sizes, const char* what,
               size_t& largest) {
    if (count && (!data || !sizes)) {
        return fail(SHOAL_EINVAL, std::string(what) + ": NULL data or sizes");
    }
    largest = 0;
    for (size_t i = 0; i < count; ++i) {
        if (!data[i] && sizes[i]) {
            return fail(SHOAL_EINVAL, std::string(what) + ": NULL data of message " + std::to_string(i));
        }
        largest = std::max(largest, sizes[i]);
    }
    return SHOAL_OK;
}

} // namespace

extern "C" {

int shoal_ring_consumer_open(shoal_runtime* rt, unsigned shard, const char* address, size_t capacity,
                             shoal_ring_consumer** out) {
    return guarded([&] {
        if (!out) {
            return fail(SHOAL_EINVAL, "shoal_ring_consumer_open: out is NULL");
        }
        *out = nullptr;
        if (int rc = check_open(rt, shard, address, "shoal_ring_consumer_open"); rc != SHOAL_OK) {
            return rc;
        }
        auto addr = parse_address(address);
        auto st = std::make_shared<consumer_state>(rt->state, shard);
        rt->state->engine().submit(shard, [st, addr, capacity] { st->open_on_shard(addr, capacity); }).get();
        if (int rc = track_opened(*rt->state, st, "shoal_ring_consumer_open"); rc != SHOAL_OK) {
            return rc;
        }
        *out = new shoal_ring_consumer{std::move(st)};
        return int(SHOAL_OK);
    });
}

int shoal_ring_consumer_descriptor(shoal_ring_consumer* c, void* out, size_t capacity, size_t* size) {
    return guarded([&] {
        if (int rc = check(c, "shoal_ring_consumer_descriptor", false); rc != SHOAL_OK) {
            return rc;
        }
        if (size) {
            *size = SHOAL_RING_DESCRIPTOR_SIZE;
        }
        if (!out || capacity < SHOAL_RING_DESCRIPTOR_SIZE) {
            return fail(!out && capacity ? SHOAL_EINVAL : SHOAL_ETOOSMALL,
                        "shoal_ring_consumer_descriptor: a descriptor has " +
                            std::to_string(SHOAL_RING_DESCRIPTOR_SIZE) + " bytes, the buffer " +
                            std::to_string(out ? capacity : 0));
        }
        const auto& d = c->state->descriptor();
        wire_descriptor w{descriptor_magic, d.addr, d.rkey, 0, d.length};
        std::memcpy(out, &w, sizeof(w));
        return int(SHOAL_OK);
    });
}

int shoal_ring_consumer_address(shoal_ring_consumer* c, char* out, size_t capacity) {
    return guarded([&] {
        if (int rc = check(c, "shoal_ring_consumer_address", false); rc != SHOAL_OK) {
            return rc;
        }
        const std::string& a = c->state->address();
        if (!out || capacity < a.size() + 1) {
            return fail(SHOAL_ETOOSMALL, "shoal_ring_consumer_address: \"" + a + "\" needs " +
                                             std::to_string(a.size() + 1) + " bytes");
        }
        std::memcpy(out, a.c_str(), a.size() + 1);
        return int(SHOAL_OK);
    });
}

size_t shoal_ring_consumer_max_message(const shoal_ring_consumer* c) {
    return c ? c->state->max_message() : 0;
}

int shoal_ring_receive(shoal_ring_consumer* c, void* out, size_t capacity, size_t* size, int timeout_ms) {
    return guarded([&] {
        if (!size || (!out && capacity)) {
            return fail(SHOAL_EINVAL, "shoal_ring_receive: NULL buffer or size");
        }
        return receive(c, timeout_ms, "shoal_ring_receive",
                       [out, capacity, size](consumer_state& st, std::span<const char> m) {
                           *size = m.size();
                           if (m.size() > capacity) {
                               // Kept as the next message: nothing is lost.
                               return std::pair<int, std::string>(
                                   SHOAL_ETOOSMALL, "the message has " + std::to_string(m.size()) +
                                                        " bytes, the buffer " + std::to_string(capacity));
                           }
                           if (!m.empty()) {
                               std::memcpy(out, m.data(), m.size());
                           }
                           st.consume();
                           return std::pair<int, std::string>(SHOAL_OK, "");
                       });
    });
}

int shoal_ring_receive_view(shoal_ring_consumer* c, const void** data, size_t* size, int timeout_ms) {
    return guarded([&] {
        if (!data || !size) {
            return fail(SHOAL_EINVAL, "shoal_ring_receive_view: NULL data or size");
        }
        *data = nullptr;
        *size = 0;
        return receive(c, timeout_ms, "shoal_ring_receive_view",
                       [data, size](consumer_state& st, std::span<const char> m) {
                           st.viewed();
                           *data = m.data();
                           *size = m.size();
                           return std::pair<int, std::string>(SHOAL_OK, "");
                       });
    });
}

int shoal_ring_release(shoal_ring_consumer* c) {
    return guarded([&] {
        if (int rc = check(c, "shoal_ring_release", true); rc != SHOAL_OK) {
            return rc;
        }
        auto st = c->state;
        st->runtime().engine().submit(st->shard(), [st] { st->consume(); }).get();
        return int(SHOAL_OK);
    });
}

int shoal_ring_receive_async(shoal_ring_consumer* c, shoal_ring_receive_cb done, void* user) {
    return guarded([&] {
        if (int rc = check(c, "shoal_ring_receive_async", false); rc != SHOAL_OK) {
            return rc;
        }
        if (!done) {
            return fail(SHOAL_EINVAL, "shoal_ring_receive_async: NULL callback");
        }
        auto st = c->state;
        return start_async(
            st, "shoal_ring_receive_async",
            [](consumer_state& s) {
                return s.next(std::nullopt).then([](std::span<const char> m) {
                    return async_result<std::span<const char>>{SHOAL_OK, {}, m};
                });
            },
            [st, done, user](int status, const char* error, async_result<std::span<const char>>* r) {
                if (status == SHOAL_OK && r) {
                    st->viewed();
                    done(user, status, r->value.data(), r->value.size(), nullptr);
                    st->consume();
                } else {
                    done(user, status, nullptr, 0, error);
                }
            });
    });
}

int shoal_ring_consumer_close(shoal_ring_consumer* c) {
    return close_handle(c ? c->state.get() : nullptr, "shoal_ring_consumer_close", "ring consumer");
}

void shoal_ring_consumer_destroy(shoal_ring_consumer* c) {
    if (c) {
        close_for_destroy(*c->state);
        delete c;
    }
}

int shoal_ring_producer_open(shoal_runtime* rt, unsigned shard, const char* address, const void* descriptor,
                             size_t size, unsigned timeout_ms, shoal_ring_producer** out) {
    return guarded([&] {
        if (!out) {
            return fail(SHOAL_EINVAL, "shoal_ring_producer_open: out is NULL");
        }
        *out = nullptr;
        if (int rc = check_open(rt, shard, address, "shoal_ring_producer_open"); rc != SHOAL_OK) {
            return rc;
        }
        if (!descriptor || size != SHOAL_RING_DESCRIPTOR_SIZE) {
            return fail(SHOAL_EINVAL, "shoal_ring_producer_open: a descriptor has " +
                                          std::to_string(SHOAL_RING_DESCRIPTOR_SIZE) + " bytes, not " +
                                          std::to_string(descriptor ? size : 0));
        }
        wire_descriptor w;
        std::memcpy(&w, descriptor, sizeof(w));
        const uint64_t data = w.length - rdma::ring_layout::header_size;
        if (w.magic != descriptor_magic || w.reserved != 0 || w.length <= rdma::ring_layout::header_size ||
            data < rdma::ring_layout::min_capacity || data > rdma::ring_layout::max_capacity ||
            (data & (data - 1)) != 0 || w.addr == 0) {
            return fail(SHOAL_EINVAL, "shoal_ring_producer_open: the bytes are not a ring descriptor");
        }
        auto addr = parse_address(address);
        auto st = std::make_shared<producer_state>(rt->state, shard);
        rdma::remote_region ring{w.addr, w.rkey, w.length};
        rt->state->engine()
            .submit(shard, [st, addr, ring, timeout_ms] { return st->open_on_shard(addr, ring, timeout_ms); })
            .get();
        if (int rc = track_opened(*rt->state, st, "shoal_ring_producer_open"); rc != SHOAL_OK) {
            return rc;
        }
        *out = new shoal_ring_producer{std::move(st)};
        return int(SHOAL_OK);
    });
}

size_t shoal_ring_producer_max_message(const shoal_ring_producer* p) {
    return p ? p->state->max_message() : 0;
}

uint64_t shoal_ring_producer_resume_record(const shoal_ring_producer* p) {
    return p ? p->state->resume_record() : 0;
}

int shoal_ring_send(shoal_ring_producer* p, const void* data, size_t size) {
    return guarded([&] {
        if (!data && size) {
            return fail(SHOAL_EINVAL, "shoal_ring_send: NULL data");
        }
        std::span<const char> msg(static_cast<const char*>(data), size);
        return blocking_send(p, size, "shoal_ring_send", [msg](producer_state& s) { return s.send(msg); });
    });
}

int shoal_ring_send_buffer(shoal_ring_producer* p, const shoal_buffer* buf, size_t offset, size_t size) {
    return guarded([&] {
        if (int rc = check(p, "shoal_ring_send_buffer", true); rc != SHOAL_OK) {
            return rc;
        }
        int rc;
        auto b = usable_buffer(buf, p->state->shard(), offset, size, "shoal_ring_send_buffer", rc);
        if (!b) {
            return rc;
        }
        return blocking_send(p, size, "shoal_ring_send_buffer", [b, offset, size](producer_state& s) {
            auto span = b->span(offset, size);
            return s.send({span.addr, span.length}).finally([span = std::move(span)] {});
        });
    });
}

int shoal_ring_send_async(shoal_ring_producer* p, const void* data, size_t size, shoal_done_cb done,
                          void* user) {
    return guarded([&] {
        if (!data && size) {
            return fail(SHOAL_EINVAL, "shoal_ring_send_async: NULL data");
        }
        auto copy = std::make_shared<std::string>(static_cast<const char*>(data), size);
        return async_send(
            p, size, done, "shoal_ring_send_async",
            [copy](producer_state& s) {
                return s.send({copy->data(), copy->size()}).finally([copy] {});
            },
            user);
    });
}

int shoal_ring_send_buffer_async(shoal_ring_producer* p, const shoal_buffer* buf, size_t offset, size_t size,
                                 shoal_done_cb done, void* user) {
    return guarded([&] {
        if (int rc = check(p, "shoal_ring_send_buffer_async", false); rc != SHOAL_OK) {
            return rc;
        }
        int rc;
        auto b = usable_buffer(buf, p->state->shard(), offset, size, "shoal_ring_send_buffer_async", rc);
        if (!b) {
            return rc;
        }
        // The span is taken on the shard when the send runs. Work handed to a shard runs in the
        // order it was handed over, so a shoal_buffer_free made after this call returned comes
        // after it: the span holds the memory until the send completed.
        return async_send(
            p, size, done, "shoal_ring_send_buffer_async",
            [b, offset, size](producer_state& s) {
                auto span = b->span(offset, size);
                return s.send({span.addr, span.length}).finally([span = std::move(span)] {});
            },
            user);
    });
}

int shoal_ring_send_many(shoal_ring_producer* p, size_t count, const void* const* data, const size_t* sizes) {
    return guarded([&] {
        size_t largest = 0;
        if (int rc = check_many(count, data, sizes, "shoal_ring_send_many", largest); rc != SHOAL_OK) {
            return rc;
        }
        std::vector<std::span<const char>> msgs;
        msgs.reserve(count);
        for (size_t i = 0; i < count; ++i) {
            msgs.emplace_back(static_cast<const char*>(data[i]), sizes[i]);
        }
        return blocking_send(p, largest, "shoal_ring_send_many", [msgs = std::move(msgs)](producer_state& s) {
            return producer_state::send_many(std::static_pointer_cast<producer_state>(s.shared_from_this()),
                                             msgs);
        });
    });
}

int shoal_ring_send_many_async(shoal_ring_producer* p, size_t count, const void* const* data,
                               const size_t* sizes, shoal_done_cb done, void* user) {
    return guarded([&] {
        size_t largest = 0, total = 0;
        if (int rc = check_many(count, data, sizes, "shoal_ring_send_many_async", largest); rc != SHOAL_OK) {
            return rc;
        }
        for (size_t i = 0; i < count; ++i) {
            total += sizes[i];
        }
        // One copy of every message, back to back; the spans into it are made on the shard.
        auto copy = std::make_shared<std::string>();
        copy->reserve(total);
        std::vector<size_t> lengths(sizes, sizes + count);
        for (size_t i = 0; i < count; ++i) {
            copy->append(static_cast<const char*>(data[i]), sizes[i]);
        }
        return async_send(
            p, largest, done, "shoal_ring_send_many_async",
            [copy, lengths = std::move(lengths)](producer_state& s) {
                std::vector<std::span<const char>> msgs;
                msgs.reserve(lengths.size());
                size_t at = 0;
                for (size_t n : lengths) {
                    msgs.emplace_back(copy->data() + at, n);
                    at += n;
                }
                return producer_state::send_many(
                           std::static_pointer_cast<producer_state>(s.shared_from_this()), std::move(msgs))
                    .finally([copy] {});
            },
            user);
    });
}

int shoal_ring_producer_close(shoal_ring_producer* p) {
    return close_handle(p ? p->state.get() : nullptr, "shoal_ring_producer_close", "ring producer");
}

void shoal_ring_producer_destroy(shoal_ring_producer* p) {
    if (p) {
        close_for_destroy(*p->state);
        delete p;
    }
}

} // extern "C"
