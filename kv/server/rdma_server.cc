#include "kv/server/rdma_server.hh"

#include "core/coroutine.hh"
#include "core/log.hh"
#include "core/smp.hh"
#include "kv/messages/internal/message_queue.hh"
#include "kv/server/registered_page_source.hh"
#include "kv/server/server.hh"
#include "kv/store/hash.hh"
#include "kv/store/internal/record.hh"
#include "net/rdma/memory_region.hh"

#include <vector>

namespace shoal::kv {

namespace rdma = net::rdma;

namespace {
logger kv_rdma_log("kv-rdma");

/// Grant slots per connection (the low bits of a token); the rest of the 28 bits count reuse.
constexpr unsigned slot_bits = 12;

store_mode mode_of(wire::mode m) noexcept {
    switch (m) {
    case wire::mode::add:
        return store_mode::add;
    case wire::mode::replace:
        return store_mode::replace;
    case wire::mode::cas:
        return store_mode::cas;
    case wire::mode::append:
        return store_mode::append;
    case wire::mode::prepend:
        return store_mode::prepend;
    default:
        return store_mode::set;
    }
}

wire::status status_of(store_result r) noexcept {
    switch (r) {
    case store_result::stored:
        return wire::status::ok;
    case store_result::not_stored:
        return wire::status::not_stored;
    case store_result::exists:
        return wire::status::exists;
    case store_result::not_found:
        return wire::status::not_found;
    case store_result::too_large:
        return wire::status::too_large;
    case store_result::no_memory:
        return wire::status::no_memory;
    }
    return wire::status::bad_request;
}

bool valid_key(std::string_view key) noexcept {
    if (key.empty() || key.size() > 250) {
        return false;
    }
    for (char c : key) {
        if (uint8_t(c) <= ' ' || c == 0x7f) {
            return false;
        }
    }
    return true;
}
} // namespace

/// A slice of a reserved item the client may WRITE into, until commit, expiry or disconnect.
struct rdma_server::grant {
    item* it = nullptr;               ///< reserved (referenced) item; null: slot free
    rdma::exported_region slice;      ///< remote-write registration of exactly the value bytes
    uint64_t h = 0;                   ///< the key's hash
    uint64_t cas = 0;                 ///< mode cas: the unique to compare
    uint32_t id = 0;                  ///< the request id the commit answers
    uint16_t gen = 0;                 ///< reuse count of the slot (in the token)
    wire::mode how = wire::mode::set; ///< storage mode applied at commit
    std::chrono::steady_clock::time_point deadline;
};

/// One client connection.
struct rdma_server::conn {
    rdma::connection c;
    net::message_connection msgs;
    rdma::immediate_channel commits;
    std::vector<grant> grants;
    std::vector<unsigned> free_slots;
    std::optional<message_queue> out; ///< replies, sent in order
    gate pending;                     ///< requests answered later (flush_all): `serve` waits
    bool closed = false;
};

rdma_server::rdma_server(rdma_server_config cfg, sharded<server>* servers)
    : _cfg(cfg)
    , _servers(servers) {
    _cfg.max_grants = std::clamp(_cfg.max_grants, 1u, 1u << slot_bits);
}

rdma_server::~rdma_server() = default;

void rdma_server::start(const net::socket_address& addr) {
    _store = &_servers->local().store();
    _pages = dynamic_cast<registered_page_source*>(&_store->pages());
    if (!_pages) {
        throw std::runtime_error("kv: the RDMA front end needs the store's pages in registered memory");
    }
    net::socket_address a = addr;
    a.set_port(uint16_t(addr.port() + this_shard_id()));
    _listener = rdma::listen_rc(a);
    _ticker.set_callback([this] { tick(); });
    _ticker.arm_periodic(_cfg.epoch_period);
    _gate.enter();
    (void)accept_loop().then_wrapped([this](future<> f) {
        f.ignore_ready_future();
        _gate.leave();
    });
}

future<> rdma_server::accept_loop() {
    while (!_stopping) {
        rdma::connection c;
        try {
            c = co_await _listener.accept();
        } catch (...) {
            if (!_stopping) {
                kv_rdma_log.warn("accept failed on shard {}: {}", this_shard_id(), std::current_exception());
            }
            break;
        }
        if (!_gate.try_enter()) {
            c.close();
            break;
        }
        (void)serve(std::move(c)).then_wrapped([this](future<> f) {
            f.ignore_ready_future();
            _gate.leave();
        });
    }
}

future<> rdma_server::serve(rdma::connection rc) {
    conn c;
    c.c = rc;
    c.msgs = rc.messages();
    c.out.emplace(c.msgs);
    c.commits = rc.immediates(wire::commit_tag);
    c.grants.resize(_cfg.max_grants);
    for (unsigned i = _cfg.max_grants; i-- > 0;) {
        c.free_slots.push_back(i);
    }
    _conns.push_back(&c);
    auto self = std::prev(_conns.end());
    ++_stats.connections;
    ++_stats.total_connections;
    future<> committing = commits_loop(c);
    try {
        for (;;) {
            std::optional<net::temporary_buffer> m = co_await c.msgs.receive();
            if (!m) {
                break;
            }
            ++_stats.requests;
            handle(c, m->get(), m->size());
        }
    } catch (...) {
        kv_rdma_log.debug("connection ended: {}", std::current_exception());
    }
    c.closed = true;
    co_await c.pending.close();
    // The client is gone (or misbehaved): its grants are revoked before their memory returns.
    for (grant& g : c.grants) {
        if (g.it) {
            ++_stats.grants_dropped;
            drop_grant(c, g);
        }
    }
    c.c.close();
    try {
        co_await std::move(committing);
    } catch (...) {
    }
    c.out->clear();
    co_await c.out->drained();
    _conns.erase(self);
    --_stats.connections;
}

future<> rdma_server::commits_loop(conn& c) {
    while (!c.closed) {
        uint32_t token = co_await c.commits.next();
        handle_commit(c, token);
    }
}

void rdma_server::locate(wire::response& r, const item* it) const noexcept {
    r.version = it->cas;
    r.addr = reinterpret_cast<uintptr_t>(it);
    r.rkey = _pages->rkey();
    r.len = uint32_t(store::record_bytes(it));
}

void rdma_server::handle(conn& c, const char* msg, size_t len) {
    wire::request q;
    wire::response r;
    r.now = _store->now();
    if (!wire::parse(msg, len, &q)) {
        refuse(c, r);
        return;
    }
    r.id = q.id;
    if (q.ver != wire::version) {
        r.code = wire::status::bad_version;
        reply(c, r);
        return;
    }
    if (q.code == wire::op::hello || q.code == wire::op::flush_all || q.code == wire::op::stats) {
        handle_keyless(c, q, len, r);
        return;
    }
    std::string_view key;
    uint64_t h = 0;
    if (!admit_key(c, q, msg, len, r, key, h)) {
        return;
    }
    switch (q.code) {
    case wire::op::gat:
    case wire::op::get:
        handle_get(c, q, key, h, r);
        return;
    case wire::op::store:
        handle_store(c, q, key, std::string_view(msg + sizeof(q) + q.key_len, q.value_len), h, r);
        return;
    case wire::op::grant:
        handle_grant(c, q, key, h, r);
        return;
    case wire::op::remove:
        r.code = status_of(_store->remove(key, h));
        reply(c, r);
        return;
    case wire::op::touch:
        r.code = _store->touch(key, h, q.exptime) ? wire::status::ok : wire::status::not_found;
        reply(c, r);
        return;
    case wire::op::incr:
    case wire::op::decr:
        handle_delta(c, q, key, h, r);
        return;
    default:
        refuse(c, r);
        return;
    }
}

void rdma_server::refuse(conn& c, wire::response& r) {
    ++_stats.bad_requests;
    r.code = wire::status::bad_request;
    reply(c, r);
}

void rdma_server::handle_keyless(conn& c, const wire::request& q, size_t len, wire::response& r) {
    if (q.code == wire::op::hello) {
        r.aux = shard_count();
        r.number = this_shard_id();
        reply(c, r);
        return;
    }
    if (len != sizeof(q)) {
        refuse(c, r);
        return;
    }
    // Answered once every shard has flushed (or been counted); other requests go on meanwhile
    // (replies are matched by id). A connection ending first waits for it in `serve`.
    if (c.pending.try_enter()) {
        future<> answered = q.code == wire::op::stats ? send_stats(c, r) : flush_everywhere(c, r, q.exptime);
        (void)std::move(answered).finally([&c] { c.pending.leave(); });
    }
}

[[gnu::always_inline]] inline bool rdma_server::admit_key(conn& c, const wire::request& q, const char* msg,
                                                          size_t len, wire::response& r,
                                                          std::string_view& key, uint64_t& h) {
    if ((q.code == wire::op::store || q.code == wire::op::grant) && q.how > wire::mode::prepend) {
        refuse(c, r); // a mode this server does not know: never read as another one
        return false;
    }
    size_t body = len - sizeof(q);
    size_t inline_value = q.code == wire::op::store ? q.value_len : 0;
    key = std::string_view(msg + sizeof(q), std::min<size_t>(q.key_len, body));
    if (body != q.key_len + inline_value || !valid_key(key)) {
        refuse(c, r);
        return false;
    }
    h = hash_key(key);
    if (unsigned owner = shard_of(h, shard_count()); owner != this_shard_id()) {
        r.code = wire::status::wrong_shard;
        r.aux = owner;
        reply(c, r);
        return false;
    }
    return true;
}

[[gnu::always_inline]] inline void rdma_server::handle_get(conn& c, const wire::request& q,
                                                           std::string_view key, uint64_t h,
                                                           wire::response& r) {
    item* it = q.code == wire::op::gat ? _store->get_and_touch(key, h, q.exptime) : _store->get(key, h);
    if (!it) {
        r.code = wire::status::not_found;
        reply(c, r);
        return;
    }
    locate(r, it);
    r.flags = it->client_flags;
    size_t limit = (q.options & wire::client_inline_limit) ? q.value_len : _cfg.inline_get_max;
    bool small = it->value_len <= limit || (q.options & wire::want_inline);
    if (small && sizeof(wire::response) + it->value_len <= c.msgs.max_message_size()) {
        ++_stats.inline_gets;
        r.is_inline = 1;
        reply(c, r, it->value());
    } else {
        ++_stats.location_gets;
        reply(c, r);
    }
}

void rdma_server::handle_store(conn& c, const wire::request& q, std::string_view key, std::string_view value,
                               uint64_t h, wire::response& r) {
    uint64_t cas = 0;
    store_result sr = _store->put(mode_of(q.how), key, h, q.flags, q.exptime, value, q.arg, &cas);
    r.code = status_of(sr);
    if (sr == store_result::stored) {
        locate(r, _store->peek(key, h));
    }
    reply(c, r);
}

void rdma_server::handle_grant(conn& c, const wire::request& q, std::string_view key, uint64_t h,
                               wire::response& r) {
    if (c.free_slots.empty()) {
        r.code = wire::status::busy;
        reply(c, r);
        return;
    }
    if (q.value_len == 0) {
        r.code = wire::status::bad_request;
        reply(c, r);
        return;
    }
    store_result why = store_result::no_memory;
    item* it = _store->reserve(key, q.flags, q.exptime, q.value_len, &why);
    if (!it) {
        r.code = status_of(why);
        reply(c, r);
        return;
    }
    rdma::exported_region slice;
    try {
        slice = rdma::export_region(it->value_data(), q.value_len, rdma::access::remote_write);
    } catch (...) {
        kv_rdma_log.warn("grant registration failed: {}", std::current_exception());
        _store->abandon(it);
        r.code = wire::status::no_memory;
        reply(c, r);
        return;
    }
    unsigned slot = c.free_slots.back();
    c.free_slots.pop_back();
    grant& g = c.grants[slot];
    g.it = it;
    g.slice = std::move(slice);
    g.h = h;
    g.cas = q.arg;
    g.id = q.id;
    g.how = q.how;
    g.deadline = std::chrono::steady_clock::now() + _cfg.grant_timeout;
    ++_stats.grants;
    ++_stats.grants_active;
    const rdma::remote_region d = g.slice.descriptor();
    r.addr = d.addr;
    r.rkey = d.rkey;
    r.len = q.value_len;
    r.token = (uint32_t(g.gen) << slot_bits | slot) & rdma::immediate_channel::max_value;
    reply(c, r);
}

void rdma_server::handle_delta(conn& c, const wire::request& q, std::string_view key, uint64_t h,
                               wire::response& r) {
    uint64_t result = 0;
    switch (_store->add_delta(key, h, q.code == wire::op::incr, q.arg, &result)) {
    case delta_result::ok:
        r.number = result;
        break;
    case delta_result::not_found:
        r.code = wire::status::not_found;
        break;
    case delta_result::non_numeric:
        r.code = wire::status::non_numeric;
        break;
    case delta_result::no_memory:
        r.code = wire::status::no_memory;
        break;
    }
    reply(c, r);
}

future<> rdma_server::send_stats(conn& c, wire::response r) {
    std::string text;
    try {
        text = co_await _servers->local().general_stats();
    } catch (...) {
        kv_rdma_log.warn("stats: {}", std::current_exception());
        r.code = wire::status::busy; // a shard is stopping
    }
    if (sizeof(r) + text.size() > c.msgs.max_message_size()) {
        r.code = wire::status::too_large;
        text.clear();
    }
    r.now = _store->now();
    reply(c, r, text);
}

future<> rdma_server::flush_everywhere(conn& c, wire::response r, int64_t exptime) {
    try {
        co_await _servers->invoke_on_all([exptime](server& s) { s.store().flush_all(exptime); });
    } catch (...) {
        kv_rdma_log.warn("flush_all: {}", std::current_exception());
        r.code = wire::status::busy; // a shard is stopping
    }
    r.now = _store->now();
    reply(c, r);
}

void rdma_server::handle_commit(conn& c, uint32_t token) {
    unsigned slot = token & ((1u << slot_bits) - 1);
    uint16_t gen = uint16_t(token >> slot_bits);
    if (slot >= c.grants.size() || !c.grants[slot].it ||
        (c.grants[slot].gen & (rdma::immediate_channel::max_value >> slot_bits)) != gen) {
        ++_stats.bad_commits;
        return;
    }
    grant& g = c.grants[slot];
    // Revoke the slice first: from now on the client cannot change the bytes being sealed.
    g.slice.revoke();
    item* it = std::exchange(g.it, nullptr);
    uint64_t cas = 0;
    const store_mode mode = mode_of(g.how);
    store_result sr;
    item* stored = it;
    if (mode == store_mode::append || mode == store_mode::prepend) {
        // The granted bytes join the current value in a new item (`put` copies them there);
        // the reserved one goes back.
        sr = _store->put(mode, it->key(), g.h, 0, 0, it->value(), 0, &cas);
        stored = sr == store_result::stored ? _store->peek(it->key(), g.h) : nullptr;
        _store->abandon(it);
    } else {
        sr = _store->commit(mode, it, g.h, g.cas, &cas);
    }
    wire::response r;
    r.now = _store->now();
    r.id = g.id;
    r.code = status_of(sr);
    if (sr == store_result::stored && stored) {
        locate(r, stored);
    }
    ++g.gen;
    c.free_slots.push_back(slot);
    --_stats.grants_active;
    ++_stats.commits;
    reply(c, r);
}

void rdma_server::drop_grant(conn& c, grant& g) noexcept {
    g.slice.revoke(); // deregistered before the item's memory can be handed out again
    _store->abandon(std::exchange(g.it, nullptr));
    ++g.gen;
    c.free_slots.push_back(unsigned(&g - c.grants.data()));
    --_stats.grants_active;
}

void rdma_server::tick() {
    _store->advance_epoch();
    if (_stats.grants_active == 0) {
        return;
    }
    auto now = std::chrono::steady_clock::now();
    for (conn* c : _conns) {
        for (grant& g : c->grants) {
            if (g.it && g.deadline <= now) {
                ++_stats.grants_expired;
                wire::response r;
                r.now = _store->now();
                r.id = g.id;
                r.code = wire::status::expired;
                drop_grant(*c, g);
                reply(*c, r);
            }
        }
    }
}

void rdma_server::reply(conn& c, const wire::response& r, std::string_view inline_value) {
    if (c.closed) {
        return;
    }
    wire::response h = r;
    h.inline_len = uint32_t(inline_value.size());
    net::temporary_buffer b(sizeof(h) + inline_value.size());
    std::memcpy(b.get_write(), &h, sizeof(h));
    if (!inline_value.empty()) {
        std::memcpy(b.get_write() + sizeof(h), inline_value.data(), inline_value.size());
    }
    c.out->push(std::move(b));
}

future<> rdma_server::stop() {
    _stopping = true;
    _ticker.cancel();
    _listener.abort_accept();
    for (conn* c : _conns) {
        c->c.close();
    }
    co_await _gate.close();
}

future<net::socket_address> rdma_listen_on_all_shards(sharded<rdma_server>& rdma, net::socket_address addr) {
    net::socket_address first = co_await submit_to(0, [&rdma, addr] {
        rdma.local().start(addr);
        return rdma.local().local_address();
    });
    for (unsigned s = 1; s < shard_count(); ++s) {
        co_await submit_to(s, [&rdma, first] { rdma.local().start(first); });
    }
    co_return first;
}

} // namespace shoal::kv
