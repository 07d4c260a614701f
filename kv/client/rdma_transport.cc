#include "kv/client/internal/rdma_transport.hh"

#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "core/small_pool.hh"
#include "kv/messages/internal/message_queue.hh"
#include "kv/store/hash.hh"
#include "kv/store/internal/record.hh"
#include "net/rdma/context.hh"
#include "net/rdma/memory_pool.hh"

#include <cstring>
#include <type_traits>
#include <unordered_map>

namespace shoal::kv::internal {

namespace rdma = net::rdma;

/// The connection to one server shard.
struct rdma_transport::shard_conn {
    rdma::connection c;
    net::message_connection msgs;
    rdma::immediate_channel commits;
    std::optional<message_queue> out;
    std::unordered_map<uint32_t, pending> waiting;
    bool broken = false;
};

rdma_transport::rdma_transport(net::socket_address addr, unsigned index,
                               std::chrono::milliseconds connect_timeout, rdma_client_options opts)
    : _addr(addr)
    , _index(index)
    , _connect_timeout(connect_timeout)
    , _opts(opts)
    , _cache(opts.location_cache) {}

rdma_transport::~rdma_transport() = default;

std::string rdma_transport::name() const {
    return "kv server " + std::to_string(_index) + " (rdma " + _addr.to_string() + ")";
}

void rdma_transport::fail(client_errc code, const std::string& why) const {
    throw client_error(code, _index, name() + ": " + why);
}

unsigned rdma_transport::shard_of_key(std::string_view key) const noexcept {
    return kv::shard_of(hash_key(key), unsigned(_shards.size()));
}

future<std::shared_ptr<rdma_transport::shard_conn>> rdma_transport::connect_shard(unsigned shard) {
    net::socket_address a = _addr;
    a.set_port(uint16_t(_addr.port() + shard));
    const rdma::connection_options& o = rdma::shard_context::local().opts().connection;
    rdma::connection c = co_await with_timeout(steady_clock_type::now() + _connect_timeout,
                                               [&](abort_source& as) { return rdma::connect_rc(a, o, as); });
    auto s = std::make_shared<shard_conn>();
    s->c = c;
    s->msgs = c.messages();
    s->commits = c.immediates(wire::commit_tag);
    s->out.emplace(s->msgs);
    ++_stats.connections;
    ++_receivers;
    (void)receive_loop(s);
    co_return s;
}

bool rdma_transport::connected() const noexcept {
    bool healthy = !_shards.empty() && _shards.size() == _shard_count;
    for (auto& s : _shards) {
        healthy = healthy && !s->broken;
    }
    return healthy;
}

future<> rdma_transport::connect_now() {
    if (connected()) {
        co_return;
    }
    if (_connecting) {
        promise<> p;
        auto f = p.get_future();
        _connecting->push_back(std::move(p));
        co_await std::move(f);
        co_return;
    }
    if (_backoff.count() && lowres_clock::now() < _retry_at) {
        ++_stats.backoff_refusals;
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(_retry_at - lowres_clock::now());
        fail(client_errc::connection, "not connected; next attempt in " + std::to_string(left.count()) +
                                          " ms (back-off " + std::to_string(_backoff.count()) + " ms)");
    }
    if (_opts.request_timeout.count() && !_watchdog.armed()) {
        _watchdog.set_callback([this] { check_deadlines(); });
        _watchdog.arm_periodic(
            std::max<lowres_clock::duration>(_opts.request_timeout / 4, std::chrono::milliseconds(5)));
    }
    _connecting.emplace();
    ++_stats.connect_attempts;
    std::exception_ptr failed;
    try {
        co_await reconnect();
    } catch (const client_error&) {
        failed = std::current_exception();
    } catch (const std::exception& e) {
        failed = std::make_exception_ptr(
            client_error(client_errc::connection, _index, name() + ": cannot connect: " + e.what()));
    }
    if (failed) {
        ++_stats.connect_failures;
        _backoff = _backoff.count() == 0 ? _opts.reconnect_backoff_min
                                         : std::min(_backoff * 2, _opts.reconnect_backoff_max);
        _retry_at = lowres_clock::now() + _backoff;
    } else {
        _backoff = std::chrono::milliseconds(0);
    }
    auto waiters = std::move(*_connecting);
    _connecting.reset();
    for (auto& w : waiters) {
        failed ? w.set_exception(failed) : w.set_value();
    }
    if (failed) {
        std::rethrow_exception(failed);
    }
}

future<> rdma_transport::reconnect() {
    _cache.clear(); // the server may have restarted: its locations are not trusted any more
    if (_shards.empty() || _shards[0]->broken) {
        auto s0 = co_await connect_shard(0);
        if (_shards.empty()) {
            _shards.push_back(std::move(s0));
        } else {
            _shards[0]->c.close();
            _shards[0] = std::move(s0);
        }
    }
    wire::request hello;
    hello.code = wire::op::hello;
    reply r = co_await call(0, hello, {}, {});
    if (r.h.aux == 0 || r.h.aux > 1024) {
        fail(client_errc::connection, "hello announced " + std::to_string(r.h.aux) + " shards");
    }
    if (r.h.aux != _shard_count || _shards.size() != _shard_count) {
        // First use, a partial earlier attempt, or a server with another shard count: a new set.
        _shard_count = r.h.aux;
        for (size_t i = 1; i < _shards.size(); ++i) {
            _shards[i]->c.close();
        }
        _shards.resize(1);
        for (unsigned s = 1; s < _shard_count; ++s) {
            _shards.push_back(co_await connect_shard(s));
        }
        co_return;
    }
    for (unsigned s = 1; s < _shard_count; ++s) {
        if (_shards[s]->broken) {
            auto fresh = co_await connect_shard(s);
            _shards[s]->c.close();
            _shards[s] = std::move(fresh);
        }
    }
}

void rdma_transport::check_deadlines() noexcept {
    const auto now = lowres_clock::now();
    for (auto& s : _shards) {
        if (s->broken) {
            continue;
        }
        bool late = false;
        for (const auto& [id, p] : s->waiting) {
            late = late || p.deadline <= now;
        }
        if (late) {
            // The server did not answer in time: the connection is not trusted any more (a late
            // reply would match nothing); the next request connects again.
            ++_stats.timeouts;
            fail_all(s.get(),
                     std::make_exception_ptr(client_error(client_errc::connection, _index,
                                                          name() + ": no reply within " +
                                                              std::to_string(_opts.request_timeout.count()) +
                                                              " ms; connection closed")));
        }
    }
}

client_error rdma_transport::broken_by(shard_conn& s, const std::exception& e) noexcept {
    client_error err(client_errc::connection, _index, name() + ": " + e.what());
    fail_all(&s, std::make_exception_ptr(err));
    return err;
}

future<> rdma_transport::receive_loop(std::shared_ptr<shard_conn> s) {
    std::exception_ptr ex;
    try {
        for (;;) {
            std::optional<net::temporary_buffer> m = co_await s->msgs.receive();
            if (!m) {
                break;
            }
            reply r;
            if (!wire::parse(m->get(), m->size(), &r.h) || r.h.ver != wire::version ||
                sizeof(wire::response) + r.h.inline_len != m->size()) {
                throw std::runtime_error("malformed reply of " + std::to_string(m->size()) + " bytes");
            }
            r.value.assign(m->get() + sizeof(wire::response), r.h.inline_len);
            _server_now = r.h.now;
            _server_now_at = std::chrono::steady_clock::now();
            auto it = s->waiting.find(r.h.id);
            if (it == s->waiting.end()) {
                throw std::runtime_error("reply to unknown request " + std::to_string(r.h.id));
            }
            if (it->second.awaiting_grant) {
                it->second.awaiting_grant = false;
                it->second.deadline = deadline(); // now the WRITE and the commit
                bool granted = r.h.code == wire::status::ok;
                promise<reply> g = std::move(it->second.granted);
                if (!granted) {
                    s->waiting.erase(it); // no commit follows a refused grant
                }
                g.set_value(std::move(r));
                continue;
            }
            promise<reply> done = std::move(it->second.done);
            s->waiting.erase(it);
            done.set_value(std::move(r));
        }
        ex = std::make_exception_ptr(
            client_error(client_errc::connection, _index, name() + ": connection closed"));
    } catch (const std::exception& e) {
        ex = std::make_exception_ptr(client_error(client_errc::connection, _index, name() + ": " + e.what()));
    }
    fail_all(s.get(), ex);
    if (--_receivers == 0 && _receivers_done) {
        std::exchange(_receivers_done, std::nullopt)->set_value();
    }
}

void rdma_transport::fail_all(shard_conn* s, std::exception_ptr ex) noexcept {
    s->broken = true;
    s->c.close();
    auto waiting = std::move(s->waiting);
    s->waiting.clear();
    for (auto& [id, p] : waiting) {
        if (p.awaiting_grant) {
            p.granted.set_exception(ex);
        }
        p.done.set_exception(ex);
    }
}

future<rdma_transport::reply> rdma_transport::call(unsigned shard, const wire::request& q0,
                                                   std::string_view key, std::string_view value,
                                                   std::optional<future<reply>>* granted) {
    shard_conn& s = *_shards[shard];
    if (s.broken) {
        return make_exception_future<reply>(
            client_error(client_errc::connection, _index, name() + ": connection broken"));
    }
    wire::request q = q0;
    q.id = _next_id++;
    q.key_len = uint16_t(key.size());
    size_t len = sizeof(q) + key.size() + value.size();
    if (len > s.msgs.max_message_size()) {
        return make_exception_future<reply>(
            client_error(client_errc::bad_request, _index,
                         name() + ": request of " + std::to_string(len) + " bytes exceeds the message size"));
    }
    net::temporary_buffer b(len);
    std::memcpy(b.get_write(), &q, sizeof(q));
    if (!key.empty()) {
        std::memcpy(b.get_write() + sizeof(q), key.data(), key.size());
    }
    if (!value.empty()) {
        std::memcpy(b.get_write() + sizeof(q) + key.size(), value.data(), value.size());
    }
    pending& p = s.waiting[q.id];
    p.deadline = deadline();
    if (granted) {
        p.awaiting_grant = true;
        granted->emplace(p.granted.get_future());
    }
    auto f = p.done.get_future();
    s.out->push(std::move(b));
    return f;
}

void rdma_transport::remember(const std::string& key, const wire::response& h, unsigned shard) {
    if (h.len == 0) {
        return;
    }
    _cache.put(key, location{h.addr, h.rkey, h.len, shard}); // evicts any other when full
}

// Inlined into the GET paths (as `cached`): in the emulated guest a call costs more than the
// instructions around it (docs/performance-history.md, "Calls, not instructions").
[[gnu::always_inline]] inline std::optional<record::view>
rdma_transport::decode(const char* buf, uint32_t len, std::string_view key) {
    record::view v;
    // The server's clock now, estimated from its last reply (whole seconds, never ahead of it
    // by more than the one-way delay): an item past its exptime is not served from a READ.
    auto server_now = [this] {
        auto since = std::chrono::steady_clock::now() - _server_now_at;
        return _server_now + uint32_t(std::chrono::duration_cast<std::chrono::seconds>(since).count());
    };
    if (record::validate(buf, len, key, &v) != record::check::ok ||
        (v.exptime != 0 && v.exptime <= server_now())) {
        ++_stats.invalid_reads;
        return std::nullopt;
    }
    return v;
}

[[gnu::always_inline]] inline const rdma_transport::location*
rdma_transport::cached(std::string_view key, uint32_t max_len) const noexcept {
    if (_closed || _opts.time_cached_gets || !connected()) {
        return nullptr;
    }
    const location* at = _cache.find(key);
    return at && at->len <= max_len ? at : nullptr;
}

std::exception_ptr rdma_transport::read_error(shard_conn& s, std::exception_ptr error) noexcept {
    try {
        std::rethrow_exception(std::move(error));
    } catch (const std::exception& e) {
        return std::make_exception_ptr(broken_by(s, e));
    } catch (...) {
        return std::current_exception();
    }
}

void rdma_transport::stale(std::string_view key) noexcept {
    ++_stats.cache_misses;
    _cache.erase(key);
}

namespace {
/// A cached GET's key, held without a call into libc when it is short (a `std::string` copies
/// even a short key with a `memcpy` of variable size: a call per GET, on a page of its own).
class held_key {
public:
    explicit held_key(std::string_view k)
        : _len(k.size()) {
        if (_len <= sizeof(_short)) {
            copy_short(_short, k.data(), _len);
        } else {
            _long.assign(k.data(), k.size());
        }
    }
    std::string_view view() const noexcept {
        return _len <= sizeof(_short) ? std::string_view(_short, _len) : std::string_view(_long);
    }
    std::string take() { return _len <= sizeof(_short) ? std::string(_short, _len) : std::move(_long); }

private:
    /// Copies `n` (≤ 32) bytes in at most two fixed-size copies that overlap.
    static void copy_short(char* to, const char* from, size_t n) noexcept {
        if (n >= 16) {
            std::memcpy(to, from, 16);
            std::memcpy(to + n - 16, from + n - 16, 16);
        } else if (n >= 8) {
            std::memcpy(to, from, 8);
            std::memcpy(to + n - 8, from + n - 8, 8);
        } else if (n >= 4) {
            std::memcpy(to, from, 4);
            std::memcpy(to + n - 4, from + n - 4, 4);
        } else if (n > 0) {
            to[0] = from[0];
            to[n / 2] = from[n / 2];
            to[n - 1] = from[n - 1];
        }
    }

    size_t _len;
    char _short[32];
    std::string _long; ///< a key longer than `_short`
};
} // namespace

// A cached GET in flight. The READ's completion calls `complete` straight from the CQ poll: it
// validates the record and resolves the GET, whose caller then runs in the one task of the GET.
// Neither a coroutine frame (from malloc) nor a continuation task sits in between. Objects come
// from the shard's small-object pool.
template <typename Result>
struct rdma_transport::cached_read final : net::rdma::op_completion {
    static constexpr bool into_dst = std::is_same_v<Result, placed_value>;

    cached_read(rdma_transport& t, std::string_view key, rdma::local_span&& dst,
                std::shared_ptr<shard_conn> s, uint32_t len)
        : t(t)
        , key(key)
        , dst(std::move(dst))
        , s(std::move(s))
        , len(len) {}

    rdma_transport& t;
    held_key key;
    rdma::local_span dst; ///< `get_into`: the caller's buffer; `get_one`: a pool buffer of its own
    rdma::buffer own;     ///< `get_one`: that pool buffer
    std::shared_ptr<shard_conn> s;
    uint32_t len;
    promise<std::optional<Result>> done;

    void complete(std::exception_ptr error) noexcept override {
        std::unique_ptr<cached_read> self(this);
        if (error) {
            done.set_exception(t.read_error(*s, std::move(error)));
            return;
        }
        std::optional<record::view> v = t.decode(dst.addr, len, key.view());
        if (!v) { // it raced a change: through the server
            t.stale(key.view());
            rdma::local_span into = into_dst ? std::move(dst) : rdma::local_span{};
            try {
                t.read_value<Result>(key.take(), std::move(into)).forward_to(std::move(done));
            } catch (...) {
                done.set_exception(std::current_exception());
            }
            return;
        }
        ++t._stats.direct_reads;
        if constexpr (into_dst) {
            ++t._stats.zero_copy_gets;
            done.set_value(
                placed_value{size_t(v->value.data() - dst.addr), v->value.size(), v->flags, v->version});
        } else {
            try {
                done.set_value(fetched_value{std::string(v->value), v->flags, v->version});
            } catch (...) {
                done.set_exception(std::current_exception());
            }
        }
    }

    static void* operator new(size_t n) { return shoal::internal::small_pool::allocate(n); }
    static void operator delete(void* p, size_t n) noexcept { shoal::internal::small_pool::deallocate(p, n); }
};

template <typename Result>
[[gnu::always_inline]] inline future<std::optional<Result>>
rdma_transport::read_cached(const location& loc, std::string_view key, rdma::local_span&& dst) {
    cached_read<Result>* op = nullptr;
    try {
        op = new cached_read<Result>(*this, key, std::move(dst), _shards[loc.shard], loc.len);
        if constexpr (!cached_read<Result>::into_dst) {
            op->own = rdma::shard_context::local().pool().allocate(loc.len);
            op->dst = rdma::span_of(op->own, 0, loc.len);
        }
    } catch (...) {
        delete op;
        return make_exception_future<std::optional<Result>>(std::current_exception());
    }
    future<std::optional<Result>> f = op->done.get_future();
    ++_stats.reads;
    // The span without a hold: `op` holds the memory until the completion (a flush included).
    op->s->c.read(rdma::local_span{op->dst.addr, loc.len, op->dst.lkey, {}},
                  rdma::remote_region{loc.addr, loc.rkey, loc.len}, 0, *op);
    return f;
}

future<std::optional<fetched_value>> rdma_transport::get_one(std::string_view key) {
    if (const location* at = cached(key, UINT32_MAX)) {
        return read_cached<fetched_value>(*at, key, rdma::local_span{});
    }
    return read_value<fetched_value>(std::string(key), {});
}

future<std::optional<fetched_value>> rdma_transport::gat(std::string_view key, int64_t exptime) {
    return read_value<fetched_value>(std::string(key), {}, exptime);
}

future<std::optional<placed_value>> rdma_transport::get_into(std::string_view key, rdma::local_span dst) {
    if (const location* at = cached(key, dst.length)) {
        return read_cached<placed_value>(*at, key, std::move(dst));
    }
    return read_value<placed_value>(std::string(key), std::move(dst));
}

template <typename Result>
future<std::optional<Result>> rdma_transport::read_value(std::string key, rdma::local_span dst,
                                                         std::optional<int64_t> touch) {
    static_assert(std::is_same_v<Result, fetched_value> || std::is_same_v<Result, placed_value>);
    constexpr bool into_dst = std::is_same_v<Result, placed_value>;
    if (_closed) {
        fail(client_errc::bad_request, "client closed");
    }
    std::optional<get_timing> timing;
    if (_opts.time_cached_gets) {
        timing.emplace().start = std::chrono::steady_clock::now();
    }
    co_await connect_all();
    const unsigned shard = shard_of_key(key);
    location loc;
    // This READ is of a cached location (no control round trip). A gat asks the server; so does
    // a GET whose cached record is too long for `dst` (it may have shrunk since).
    bool from_cache = false;
    if (const location* at = touch ? nullptr : _cache.find(key); at && (!into_dst || at->len <= dst.length)) {
        loc = *at;
        from_cache = true;
    }
    for (unsigned round = 0;;) {
        if (!from_cache) {
            reply r = co_await call(shard, get_request(key, touch, round++), key, {});
            if (r.h.code == wire::status::not_found) {
                co_return std::nullopt;
            }
            if (std::optional<Result> v = take_get_reply<Result>(key, shard, r, dst, loc)) {
                co_return std::move(v);
            }
        }
        // The READ, in this coroutine (not one of its own): its completion resumes the GET
        // directly, one task hand-off less per GET.
        std::shared_ptr<shard_conn> s = _shards[loc.shard];
        rdma::buffer b; // without `dst`: a pool buffer of our own
        rdma::local_span into = read_target<Result>(loc, dst, b);
        ++_stats.reads;
        if (timing) {
            timing->posted = std::chrono::steady_clock::now();
        }
        std::optional<client_error> failed;
        try {
            co_await s->c.read(std::move(into), rdma::remote_region{loc.addr, loc.rkey, loc.len});
        } catch (const std::exception& e) {
            failed.emplace(broken_by(*s, e));
        }
        if (failed) {
            throw *failed;
        }
        if (timing) {
            timing->completed = std::chrono::steady_clock::now();
        }
        if (std::optional<record::view> v = decode(into_dst ? dst.addr : b.data(), loc.len, key)) {
            if (from_cache) {
                count_direct_read(timing);
            }
            co_return value_read<Result>(*v, dst);
        }
        if (from_cache) {
            ++_stats.cache_misses;
        }
        from_cache = false;
        timing.reset(); // only GETs served by their cached location are timed
        _cache.erase(key);
    }
}

wire::request rdma_transport::get_request(const std::string& key, std::optional<int64_t> touch,
                                          unsigned round) {
    if (round > _opts.read_retries) {
        fail(client_errc::server, "the value of '" + key + "' changed under every READ");
    }
    ++_stats.control_gets;
    wire::request q;
    q.code = touch ? wire::op::gat : wire::op::get;
    // A READ raced a change: through the server. A gat's value comes inline too: a READ of a
    // record touched into the past would find it expired.
    q.options = round > 0 || touch ? wire::want_inline : 0;
    q.exptime = touch.value_or(0);
    if (_opts.inline_get_max) {
        q.options |= wire::client_inline_limit;
        q.value_len = *_opts.inline_get_max;
    }
    return q;
}

template <typename Result>
std::optional<Result> rdma_transport::take_get_reply(const std::string& key, unsigned shard, reply& r,
                                                     const rdma::local_span& dst, location& loc) {
    constexpr bool into_dst = std::is_same_v<Result, placed_value>;
    if (r.h.code != wire::status::ok) {
        fail(client_errc::server, "GET answered status " + std::to_string(unsigned(r.h.code)));
    }
    remember(key, r.h, shard);
    if (r.h.is_inline) {
        ++_stats.inline_values;
        if constexpr (!into_dst) {
            return fetched_value{std::move(r.value), r.h.flags, r.h.version};
        } else {
            std::optional<placed_value> placed = copy_into(dst, r.value, r.h.flags, r.h.version);
            if (!placed) {
                throw client_error(client_errc::bad_request, _index,
                                   name() + ": get_into: the value of '" + key + "' has " +
                                       std::to_string(r.value.size()) + " bytes, the buffer " +
                                       std::to_string(dst.length),
                                   r.value.size());
            }
            return placed;
        }
    }
    loc = location{r.h.addr, r.h.rkey, r.h.len, shard};
    if (into_dst && loc.len > dst.length) {
        throw client_error(client_errc::bad_request, _index,
                           name() + ": get_into: the record of '" + key + "' has " + std::to_string(loc.len) +
                               " bytes (get_into_capacity), the buffer " + std::to_string(dst.length),
                           loc.len);
    }
    return std::nullopt;
}

template <typename Result>
rdma::local_span rdma_transport::read_target(const location& loc, const rdma::local_span& dst,
                                             rdma::buffer& b) {
    if constexpr (std::is_same_v<Result, placed_value>) {
        return rdma::local_span{dst.addr, loc.len, dst.lkey, dst.hold};
    } else {
        b = rdma::shard_context::local().pool().allocate(loc.len);
        return rdma::span_of(b, 0, loc.len);
    }
}

void rdma_transport::count_direct_read(const std::optional<get_timing>& timing) noexcept {
    ++_stats.direct_reads;
    if (!timing) {
        return;
    }
    auto ns = [](auto d) { return uint64_t(std::chrono::nanoseconds(d).count()); };
    ++_stats.timed_gets;
    _stats.timed_before_ns += ns(timing->posted - timing->start);
    _stats.timed_read_ns += ns(timing->completed - timing->posted);
    _stats.timed_after_ns += ns(std::chrono::steady_clock::now() - timing->completed);
}

template <typename Result>
Result rdma_transport::value_read(const record::view& v, const rdma::local_span& dst) {
    if constexpr (std::is_same_v<Result, placed_value>) {
        ++_stats.zero_copy_gets;
        return placed_value{size_t(v.value.data() - dst.addr), v.value.size(), v.flags, v.version};
    } else {
        return fetched_value{std::string(v.value), v.flags, v.version};
    }
}

future<std::vector<std::optional<fetched_value>>> rdma_transport::get(std::vector<std::string> keys) {
    std::vector<future<std::optional<fetched_value>>> fs;
    fs.reserve(keys.size());
    for (auto& k : keys) {
        fs.push_back(get_one(std::move(k)));
    }
    return when_all_succeed(std::move(fs));
}

namespace {
store_outcome outcome_of(wire::status s) {
    switch (s) {
    case wire::status::ok:
        return store_outcome::stored;
    case wire::status::not_stored:
        return store_outcome::not_stored;
    case wire::status::exists:
        return store_outcome::exists;
    case wire::status::not_found:
        return store_outcome::not_found;
    default:
        throw std::runtime_error("status " + std::to_string(unsigned(s)));
    }
}

wire::mode mode_of(store_op op) {
    switch (op) {
    case store_op::add:
        return wire::mode::add;
    case store_op::replace:
        return wire::mode::replace;
    case store_op::cas:
        return wire::mode::cas;
    case store_op::append:
        return wire::mode::append;
    case store_op::prepend:
        return wire::mode::prepend;
    default:
        return wire::mode::set;
    }
}

const char* status_text(wire::status s) {
    switch (s) {
    case wire::status::too_large:
        return "object too large for cache";
    case wire::status::no_memory:
        return "out of memory storing object";
    case wire::status::non_numeric:
        return "cannot increment or decrement non-numeric value";
    case wire::status::busy:
        return "too many grants in flight";
    case wire::status::expired:
        return "grant expired before its commit";
    case wire::status::bad_request:
        return "bad request";
    default:
        return "unexpected status";
    }
}
} // namespace

future<store_outcome> rdma_transport::store(store_op op, std::string_view key, std::string_view value,
                                            uint32_t flags, int64_t exptime, uint64_t cas_unique) {
    return put(op, key, value, {}, flags, exptime, cas_unique);
}

future<store_outcome> rdma_transport::store_from(store_op op, std::string_view key, rdma::local_span src,
                                                 uint32_t flags, int64_t exptime, uint64_t cas_unique) {
    std::string_view value(src.addr, src.length);
    return put(op, key, value, std::move(src), flags, exptime, cas_unique);
}

future<store_outcome> rdma_transport::put(store_op op, std::string_view key_in, std::string_view value_in,
                                          rdma::local_span src, uint32_t flags, int64_t exptime,
                                          uint64_t cas_unique) {
    std::string key(key_in);
    co_await prepare_write(key);
    unsigned shard = shard_of_key(key);
    wire::request q;
    q.how = mode_of(op);
    q.flags = flags;
    q.exptime = exptime;
    q.arg = cas_unique;
    q.value_len = uint32_t(value_in.size());
    reply r;
    if (value_in.size() <= _opts.inline_put_max &&
        sizeof(wire::request) + key.size() + value_in.size() <= _shards[shard]->msgs.max_message_size()) {
        q.code = wire::op::store;
        ++_stats.inline_puts;
        r = co_await call(shard, q, key, value_in);
    } else {
        // The value goes to a registered buffer now (the caller's view is only valid during the
        // call) unless it is in one already (`store_from`: held by `src`), then straight into the
        // granted slice of the item with one WRITE_WITH_IMM.
        if (src.addr) {
            ++_stats.zero_copy_puts;
        } else {
            rdma::buffer b = rdma::shard_context::local().pool().allocate(value_in.size());
            std::memcpy(b.data(), value_in.data(), value_in.size());
            src = rdma::span_of(b, 0, value_in.size()); // holds `b`
        }
        q.code = wire::op::grant;
        ++_stats.granted_puts;
        std::optional<future<reply>> granted;
        std::shared_ptr<shard_conn> s = _shards[shard]; // the grant's connection, even if replaced
        future<reply> done = call(shard, q, key, {}, &granted);
        if (!granted) {
            r = co_await std::move(done); // refused before sending
        } else {
            reply g;
            bool lost = false;
            try {
                g = co_await std::move(*granted);
            } catch (...) {
                lost = true; // the connection failed: `done` holds the same error
            }
            if (lost) {
                r = co_await std::move(done);
            } else if (g.h.code != wire::status::ok) {
                done.ignore_ready_future();
                r = std::move(g);
            } else {
                try {
                    co_await s->commits.write_with_imm(
                        std::move(src), rdma::remote_region{g.h.addr, g.h.rkey, g.h.len}, 0, g.h.token);
                } catch (const std::exception& e) {
                    broken_by(*s, e); // `done` fails with it
                }
                r = co_await std::move(done);
            }
        }
    }
    if (r.h.code == wire::status::ok) {
        remember(key, r.h, shard);
    }
    try {
        co_return outcome_of(r.h.code);
    } catch (const std::runtime_error&) {
        fail(client_errc::server, std::string("store: ") + status_text(r.h.code));
    }
}

future<bool> rdma_transport::found_or_missing(wire::request q, std::string key, const char* what,
                                              bool moves) {
    if (moves) {
        co_await prepare_write(key);
    } else {
        co_await ready();
    }
    reply r = co_await call(shard_of_key(key), q, key, {});
    if (r.h.code != wire::status::ok && r.h.code != wire::status::not_found) {
        fail(client_errc::server, std::string(what) + ": " + status_text(r.h.code));
    }
    co_return r.h.code == wire::status::ok;
}

future<bool> rdma_transport::remove(std::string_view key) {
    wire::request q;
    q.code = wire::op::remove;
    return found_or_missing(q, std::string(key), "delete", true);
}

future<bool> rdma_transport::touch(std::string_view key, int64_t exptime) {
    wire::request q;
    q.code = wire::op::touch;
    q.exptime = exptime;
    // The cached location stays good: the server seals the record again with its new exptime.
    return found_or_missing(q, std::string(key), "touch", false);
}

future<> rdma_transport::flush_all(int64_t delay) {
    co_await ready();
    wire::request q;
    q.code = wire::op::flush_all;
    q.exptime = delay;
    reply r = co_await call(0, q, {}, {}); // any shard: it flushes them all before it answers
    if (r.h.code != wire::status::ok) {
        fail(client_errc::server, std::string("flush_all: ") + status_text(r.h.code));
    }
    if (delay <= 0) {
        _cache.clear(); // every location is dead now (a delayed flush's die at its deadline)
    }
}

future<server_stats> rdma_transport::server_statistics() {
    co_await ready();
    wire::request q;
    q.code = wire::op::stats;
    reply r = co_await call(0, q, {}, {}); // any shard: it sums them all
    if (r.h.code != wire::status::ok) {
        fail(client_errc::server, std::string("stats: ") + status_text(r.h.code));
    }
    std::optional<server_stats> s = parse_stats_text(r.value);
    if (!s) {
        fail(client_errc::server, "stats: an answer that is not memcached's stats text");
    }
    co_return std::move(*s);
}

future<std::optional<uint64_t>> rdma_transport::delta(bool incr, std::string_view key_in, uint64_t delta) {
    std::string key(key_in);
    co_await prepare_write(key);
    wire::request q;
    q.code = incr ? wire::op::incr : wire::op::decr;
    q.arg = delta;
    reply r = co_await call(shard_of_key(key), q, key, {});
    if (r.h.code == wire::status::not_found) {
        co_return std::nullopt;
    }
    if (r.h.code != wire::status::ok) {
        fail(client_errc::server, std::string(incr ? "incr: " : "decr: ") + status_text(r.h.code));
    }
    co_return r.h.number;
}

future<> rdma_transport::ready() {
    if (_closed) {
        fail(client_errc::bad_request, "client closed");
    }
    co_await connect_all();
}

future<> rdma_transport::close() {
    _closed = true;
    // Requests in flight finish first.
    for (;;) {
        bool busy = false;
        for (auto& s : _shards) {
            busy = busy || (!s->broken && !s->waiting.empty());
        }
        if (!busy) {
            break;
        }
        co_await sleep(std::chrono::milliseconds(1));
    }
    for (auto& s : _shards) {
        co_await s->out->drained();
        s->c.close();
    }
    _watchdog.cancel();
    if (_receivers) {
        _receivers_done.emplace();
        co_await _receivers_done->get_future();
    }
    _shards.clear();
}

} // namespace shoal::kv::internal
