#include "kv/server/server.hh"

#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "core/log.hh"
#include "kv/protocol/executor.hh"
#include "kv/server/internal/item_buffer.hh"
#include "kv/store/hash.hh"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <sys/resource.h>
#include <unistd.h>

namespace shoal::kv {

namespace {

logger kv_log("kv");

/// The shard's page source: the configured factory's, else heap pages.
std::unique_ptr<page_source> make_pages(const server_config& cfg) {
    size_t page = store::page_size_for(cfg.store);
    if (cfg.page_source_factory) {
        return cfg.page_source_factory(page, std::max<size_t>(1, cfg.store.memory_limit / page));
    }
    return std::make_unique<heap_page_source>(page);
}

uint32_t unix_now() {
    return uint32_t(::time(nullptr));
}

/// memcached's idle_timeout for one connection: a read that waits longer than the timeout
/// since the connection's last activity is aborted. One timer per connection, re-armed at most
/// once per timeout period (not per read).
class idle_watch {
public:
    explicit idle_watch(std::chrono::seconds timeout)
        : _timeout(timeout) {
        if (enabled()) {
            _timer.set_callback([this] { check(); });
            _timer.arm(_timeout);
        }
    }
    /// True when the connection has an idle timeout.
    bool enabled() const noexcept { return _timeout.count() > 0; }
    /// What a read waits with.
    abort_source& source() noexcept { return _as; }
    /// The connection did something now.
    void active() noexcept {
        if (enabled()) {
            _last = steady_clock_type::now();
        }
    }

private:
    void check() {
        auto idle_for = steady_clock_type::now() - _last;
        if (idle_for >= _timeout) {
            _as.request_abort_ex(std::runtime_error("idle timeout"));
        } else {
            _timer.arm(_timeout - idle_for);
        }
    }

    std::chrono::seconds _timeout;
    steady_clock_type::time_point _last = steady_clock_type::now();
    abort_source _as;
    timer<> _timer;
};

/// Keys of a multi-get handled per round: bounds the replies a connection holds at once.
constexpr size_t get_batch = 16;

} // namespace

server::server(server_config cfg, sharded<server>* peers, shared_counters* counters)
    : _cfg(cfg)
    , _peers(peers)
    , _shared(counters)
    , _store(cfg.store, make_pages(cfg), unix_now())
    , _started(unix_now()) {
    _clock.set_callback([this] { _store.set_time(unix_now()); });
    if (cfg.tick_clock) {
        _clock.arm_periodic(std::chrono::seconds(1));
    }
}

void server::start(const net::socket_address& addr) {
    net::listen_options opts;
    opts.reuse_port = true;
    // Out of descriptors, the listener refuses with memcached's words (a reserve descriptor
    // per shard) instead of leaving clients in the backlog.
    opts.refusal = "ERROR Too many open connections\r\n";
    _ss = net::tcp::listen(addr, opts);
    _conns.accept_from(_ss, [this](net::connected_socket s) { return admit(std::move(s)); });
}

future<net::socket_address> listen_on_all_shards(sharded<server>& servers, net::socket_address addr) {
    net::socket_address bound = co_await servers.invoke_on(0, [addr](server& s) {
        s.start(addr);
        return s.local_address();
    });
    co_await servers.invoke_on_all([bound](server& s) {
        if (this_shard_id() != 0) {
            s.start(bound);
        }
    });
    co_return bound;
}

future<> server::admit(net::connected_socket s) {
    if (_shared->connections.fetch_add(1) >= _cfg.max_connections) {
        _shared->connections.fetch_sub(1);
        ++_conn.rejected_connections;
        auto out = s.output();
        try {
            co_await out.write("ERROR Too many open connections\r\n");
            co_await out.close();
        } catch (...) {
        }
        co_return;
    }
    try {
        co_await serve(std::move(s));
    } catch (...) {
    }
    _shared->connections.fetch_sub(1);
}

future<> server::write_reply(net::output_stream& out, reply_batch& reply) {
    _conn.bytes_written += reply.size();
    return reply.write_to(out);
}

void server::add_get_key(const request& r, std::string_view key, uint64_t h, reply_batch& reply) {
    item* held;
    execute_get_key(r, key, h, _store, reply.text(), &held, _cfg.zero_copy_min);
    if (held) {
        reply.add_value(item_value_buffer(_store, held, this_shard_id()));
        reply.text() += "\r\n";
    }
}

bool server::try_local(const request& r, reply_batch& reply, bool& close) {
    switch (r.cmd) {
    case command::version:
        reply.text() += "VERSION ";
        reply.text() += protocol_version;
        reply.text() += "\r\n";
        return true;
    case command::verbosity:
        if (!r.noreply) {
            reply.text() += "OK\r\n";
        }
        return true;
    case command::mn:
        reply.text() += "MN\r\n";
        return true;
    case command::quit:
        close = true;
        return true;
    case command::get:
    case command::gets:
    case command::gat:
    case command::gats: {
        if (r.keys.size() > get_batch) {
            return false;
        }
        unsigned me = this_shard_id();
        unsigned n = shard_count();
        uint64_t hs[get_batch];
        for (size_t i = 0; i < r.keys.size(); ++i) {
            hs[i] = hash_key(r.keys[i]);
            if (shard_of(hs[i], n) != me) {
                return false;
            }
        }
        for (size_t i = 0; i < r.keys.size(); ++i) {
            add_get_key(r, r.keys[i], hs[i], reply);
        }
        reply.text() += "END\r\n";
        return true;
    }
    case command::flush_all:
    case command::stats:
        return false;
    default: {
        uint64_t h = hash_key(r.key);
        if (shard_of(h, shard_count()) != this_shard_id()) {
            return false;
        }
        execute_key_command(r, h, _store, reply.text());
        return true;
    }
    }
}

future<> server::handle_remote(const request& r, reply_batch& reply, net::output_stream& out) {
    switch (r.cmd) {
    case command::get:
    case command::gets:
    case command::gat:
    case command::gats:
        co_await handle_get(r, reply, out);
        co_return;
    case command::flush_all:
        co_await _peers->invoke_on_all([exptime = r.exptime](server& s) { s._store.flush_all(exptime); });
        if (!r.noreply) {
            reply.text() += "OK\r\n";
        }
        co_return;
    case command::stats:
        co_await handle_stats(r, reply);
        co_return;
    default: {
        uint64_t h = hash_key(r.key);
        unsigned owner = shard_of(h, shard_count());
        reply.text() += co_await _peers->invoke_on(owner, [&r, h](server& s) {
            std::string part;
            execute_key_command(r, h, s._store, part);
            return part;
        });
        co_return;
    }
    }
}

future<> server::handle_get(const request& r, reply_batch& reply, net::output_stream& out) {
    unsigned me = this_shard_id();
    unsigned n = shard_count();
    /// One key's reply made on its owner shard: the text, and the item whose value is sent
    /// from the owner's memory (null when the value is in the text).
    struct part {
        std::string text;
        item* held = nullptr;
        kv::store* owner = nullptr;
    };
    std::vector<uint64_t> hs(get_batch);
    std::vector<unsigned> owner(get_batch);
    std::vector<part> parts(get_batch);
    size_t min = _cfg.zero_copy_min;
    for (size_t first = 0; first < r.keys.size(); first += get_batch) {
        size_t count = std::min(get_batch, r.keys.size() - first);
        bool remote = false;
        for (size_t i = 0; i < count; ++i) {
            hs[i] = hash_key(r.keys[first + i]);
            owner[i] = shard_of(hs[i], n);
            remote |= owner[i] != me;
            parts[i].text.clear();
            parts[i].held = nullptr;
        }
        if (!remote) {
            for (size_t i = 0; i < count; ++i) {
                add_get_key(r, r.keys[first + i], hs[i], reply);
            }
        } else {
            // One batch per owning shard; the owners write their keys' replies in place.
            std::vector<future<>> batches;
            for (unsigned s = 0; s < n; ++s) {
                if (s == me || std::find(owner.begin(), owner.begin() + count, s) == owner.begin() + count) {
                    continue;
                }
                batches.push_back(_peers->invoke_on(s, [&, first, count, s, min](server& peer) {
                    for (size_t i = 0; i < count; ++i) {
                        if (owner[i] == s) {
                            execute_get_key(r, r.keys[first + i], hs[i], peer._store, parts[i].text,
                                            &parts[i].held, min);
                            parts[i].owner = &peer._store;
                        }
                    }
                }));
            }
            for (size_t i = 0; i < count; ++i) {
                if (owner[i] == me) {
                    execute_get_key(r, r.keys[first + i], hs[i], _store, parts[i].text, &parts[i].held, min);
                    parts[i].owner = &_store;
                }
            }
            // Every held item goes into the reply (whose buffers drop the references) even if
            // a batch failed; then the first failure ends the connection.
            auto done = co_await when_all(std::move(batches));
            std::exception_ptr failed;
            for (auto& f : done) {
                if (f.failed()) {
                    auto ex = f.get_exception();
                    failed = failed ? failed : ex;
                }
            }
            for (size_t i = 0; i < count; ++i) {
                reply.text() += parts[i].text;
                if (parts[i].held) {
                    reply.add_value(item_value_buffer(*parts[i].owner, parts[i].held, owner[i]));
                    reply.text() += "\r\n";
                }
            }
            if (failed) {
                std::rethrow_exception(failed);
            }
        }
        if (reply.size() >= _cfg.reply_flush_bytes) {
            co_await write_reply(out, reply);
        }
    }
    reply.text() += "END\r\n";
}

server_info server::info() const {
    server_info info;
    info.pid = uint32_t(::getpid());
    info.now = _store.now();
    info.uptime = info.now - _started;
    info.threads = shard_count();
    info.max_connections = _cfg.max_connections;
    info.limit_maxbytes = _cfg.limit_maxbytes;
    info.item_size_max = _cfg.store.max_item_size;
    info.port = _cfg.port;
    info.growth_factor = _cfg.store.growth_factor;
    return info;
}

future<std::string> server::general_stats() {
    store_stats s = co_await _peers->map_reduce([](server& sv) { return sv._store.stats(); }, store_stats(),
                                                [](store_stats a, const store_stats& b) { return a += b; });
    connection_stats c =
        co_await _peers->map_reduce([](server& sv) { return sv.conn_stats(); }, connection_stats(),
                                    [](connection_stats a, const connection_stats& b) { return a += b; });
    std::string out;
    format_general_stats(s, c, info(), out);
    co_return out;
}

future<> server::handle_stats(const request& r, reply_batch& reply) {
    if (r.arg.empty()) {
        reply.text() += co_await general_stats();
    } else if (r.arg == "settings") {
        format_settings(info(), reply.text());
    } else if (r.arg == "slabs" || r.arg == "items") {
        using classes = std::vector<std::vector<slab_class_info>>;
        classes all =
            co_await _peers->map_reduce([](server& sv) { return sv._store.slab_classes(); }, classes(),
                                        [](classes a, std::vector<slab_class_info> b) {
                                            a.push_back(std::move(b));
                                            return a;
                                        });
        auto merged = merge_classes(all);
        if (r.arg == "slabs") {
            store_stats s =
                co_await _peers->map_reduce([](server& sv) { return sv._store.stats(); }, store_stats(),
                                            [](store_stats a, const store_stats& b) { return a += b; });
            format_slabs(merged, s.total_malloced, reply.text());
        } else {
            format_items(merged, _store.now(), reply.text());
        }
    } else if (r.arg == "reset") {
        co_await _peers->invoke_on_all([](server& sv) {
            sv._store.reset_stats();
            sv._conn.total_connections = sv._conn.curr_connections;
            sv._conn.rejected_connections = sv._conn.bytes_read = sv._conn.bytes_written = 0;
            sv._refused_at_reset = sv._ss.refused_connections();
        });
        reply.text() += "RESET\r\n";
    } else if (r.arg == "detail") {
        reply.text() += "CLIENT_ERROR usage: stats detail on|off|dump\r\n";
    } else {
        reply.text() += "ERROR\r\n";
    }
}

future<> server::serve(net::connected_socket s) {
    ++_conn.curr_connections;
    ++_conn.total_connections;
    auto in = s.input();
    auto out = s.output();
    idle_watch idle(_cfg.idle_timeout);
    std::string pending; // unparsed bytes kept across reads (a request split by the network)
    reply_batch reply;   // replies of the current batch: one write, one send
    request req;
    uint64_t skip = 0; // bytes of a swallowed data block still to come
    bool closing = false;
    try {
        while (!closing) {
            // (Two statements: GCC 12 mishandles co_await on a conditional of two futures.)
            net::temporary_buffer b;
            if (idle.enabled()) {
                b = co_await in.read(idle.source());
            } else {
                b = co_await in.read();
            }
            if (b.empty()) {
                break;
            }
            idle.active();
            _conn.bytes_read += b.size();
            auto received = steady_clock_type::now();
            std::string_view data = b.view();
            if (skip) {
                size_t n = size_t(std::min<uint64_t>(skip, data.size()));
                data.remove_prefix(n);
                skip -= n;
            }
            if (!pending.empty()) {
                pending.append(data);
                data = pending;
            }
            size_t pos = 0;
            while (pos < data.size() && !closing) {
                parse_result pr = parse_request(data.substr(pos), req, _cfg.limits);
                if (pr.kind == parse_result::incomplete) {
                    if (pr.value_at && req.data_len >= _cfg.stream_value_min) {
                        // A large value on its way: it lands in store memory, not in `pending`.
                        skip = co_await take_value(in, idle.enabled() ? &idle.source() : nullptr, req,
                                                   data.substr(pos + pr.value_at), reply);
                        pos = data.size();
                        if (req.no_memory && !try_local(req, reply, closing)) {
                            co_await handle_remote(req, reply, out);
                        }
                    }
                    break;
                }
                if (pr.kind == parse_result::close) {
                    closing = true;
                    break;
                }
                pos += pr.consumed;
                if (pr.kind == parse_result::reply) {
                    reply.text().append(pr.text);
                } else if (!try_local(req, reply, closing)) {
                    co_await handle_remote(req, reply, out);
                }
                if (pr.skip) {
                    size_t n = size_t(std::min<uint64_t>(pr.skip, data.size() - pos));
                    pos += n;
                    skip = pr.skip - n;
                }
                if (reply.size() >= _cfg.reply_flush_bytes) {
                    co_await write_reply(out, reply);
                }
            }
            if (pos >= data.size()) {
                pending.clear();
            } else if (!pending.empty() && data.data() == pending.data()) {
                pending.erase(0, pos);
            } else {
                pending.assign(data.substr(pos));
            }
            if (!reply.empty()) {
                co_await write_reply(out, reply);
                co_await out.flush();
                _latency.observe(std::chrono::duration<double>(steady_clock_type::now() - received).count());
            }
        }
        co_await out.close();
    } catch (...) {
        if (idle.enabled() && idle.source().abort_requested()) {
            ++_conn.idle_kicks;
        }
        kv_log.debug("connection from {} ended: {}", s.peer_address().to_string(), std::current_exception());
    }
    --_conn.curr_connections;
}

namespace {
/// A data block landing in reserved item memory: its `len` value bytes into `dst`, then its
/// two-byte end, which must be "\r\n".
struct block_landing {
    char* dst;
    size_t len;
    char crlf[2] = {};
    size_t got = 0;

    /// Copies the block's next bytes from `bytes`; returns how many it took.
    size_t absorb(std::string_view bytes) noexcept {
        size_t n = std::min(bytes.size(), len - std::min(got, len));
        std::memcpy(dst + got, bytes.data(), n);
        got += n;
        for (; n < bytes.size() && got < len + 2; ++n, ++got) {
            crlf[got - len] = bytes[n];
        }
        return n;
    }
    /// The whole block, its end included, has arrived.
    bool complete() const noexcept { return got >= len + 2; }
    /// The block ends with "\r\n".
    bool well_ended() const noexcept { return crlf[0] == '\r' && crlf[1] == '\n'; }
};
} // namespace

future<uint64_t> server::take_value(net::input_stream& in, abort_source* as, request& r,
                                    std::string_view first, reply_batch& reply) {
    uint64_t h = hash_key(r.key);
    unsigned owner = shard_of(h, shard_count());
    const size_t len = size_t(r.data_len);
    const bool in_place = links_landed_value(r);
    auto reserve = [&r, len, in_place](server& s) { return s.reserve_landing(r, len, in_place); };
    item* landing = owner == this_shard_id() ? reserve(*this) : co_await _peers->invoke_on(owner, reserve);
    if (!landing) {
        r.no_memory = true;
        co_return uint64_t(len) + 2 - first.size();
    }
    // Ends the reservation (on the owner); `linked`: execute_landed_storage already did.
    auto release = [landing, len](server& s, bool linked) {
        s._conn.landing_bytes -= len;
        if (!linked) {
            s._store.abandon(landing);
        }
    };
    // The bytes go into the reserved item as they come: the key's store accounts for them and
    // nobody else touches the item until it is handed back to its shard below.
    block_landing block{landing->value_data(), len};
    block.absorb(first);
    std::exception_ptr failed;
    try {
        while (!block.complete()) {
            net::temporary_buffer b;
            if (as) {
                b = co_await in.read(*as);
            } else {
                b = co_await in.read();
            }
            if (b.empty()) {
                throw std::runtime_error("connection closed in the middle of a value");
            }
            _conn.bytes_read += b.size();
            b.trim_front(block.absorb(b.view()));
            if (!b.empty()) {
                in.unread(std::move(b));
            }
        }
    } catch (...) {
        failed = std::current_exception();
    }
    if (failed || !block.well_ended()) {
        if (owner == this_shard_id()) {
            release(*this, false);
        } else {
            co_await _peers->invoke_on(owner, [&release](server& s) { release(s, false); });
        }
        if (failed) {
            std::rethrow_exception(failed);
        }
        if (!r.noreply || r.cmd == command::ms) {
            reply.text() += bad_data_chunk_reply;
        }
        co_return 0;
    }
    r.value = std::string_view(block.dst, len);
    // The request runs where the key lives, and ends the reservation there in the same visit.
    auto execute = [&r, h, landing, in_place, &release](server& s, std::string& part) {
        if (in_place) {
            execute_landed_storage(r, h, landing, s._store, part);
        } else {
            execute_key_command(r, h, s._store, part);
        }
        release(s, in_place);
    };
    if (owner == this_shard_id()) {
        execute(*this, reply.text());
    } else {
        reply.text() += co_await _peers->invoke_on(owner, [&execute](server& s) {
            std::string part;
            execute(s, part);
            return part;
        });
    }
    co_return 0;
}

item* server::reserve_landing(const request& r, size_t len, bool in_place) {
    // Values in flight may hold at most half of the store (or one largest item): the rest stays
    // for the others.
    size_t cap = std::max(_store.memory_limit() / 2, _store.max_item_size());
    if (_conn.landing_bytes + len > cap) {
        return nullptr;
    }
    store_result why = store_result::stored;
    item* it = in_place ? _store.reserve(r.key, r.client_flags, r.exptime, len, &why)
                        : _store.reserve(r.key, 0, 0, len, &why);
    _conn.landing_bytes += it ? len : 0;
    return it;
}

future<> server::stop() {
    _clock.cancel();
    // Connections drain (their replies go out) until the deadline; a client that does not read
    // holds its connection in a blocked write, so what is left then is aborted.
    co_await _conns.stop(_cfg.drain_timeout);
    // Replies sent from item memory hold references until the socket lets go of their buffers
    // (an aborted connection's sends complete as cancelled shortly after); the store must
    // outlive them.
    for (int waited = 0; _store.refs_held() && waited < 5000; ++waited) {
        co_await sleep(std::chrono::milliseconds(1));
    }
    if (_store.refs_held()) {
        kv_log.error("stopping with {} item references still held by replies", _store.refs_held());
    }
}

} // namespace shoal::kv
