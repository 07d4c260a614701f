// Seed 003's remote memory pool: the server lends exported regions over a control connection,
// the client bump-allocates slices from them.
//
// Control protocol (docs/rdma.md, "Remote memory pool"), host byte order, one message each way
// per request, in order:
//   request {uint32 magic "SHPL", uint32 op, uint64 arg}      op 1 lease (arg = bytes),
//                                                              op 2 release (arg = lease id)
//   reply   {uint32 magic, uint32 status, uint64 id, uint64 addr, uint64 length, uint32 rkey,
//            uint32 text length} + text                        status 0 ok, else the reason
#include "net/rdma/services/remote_pool.hh"

#include "core/smp.hh"
#include "net/rdma/error.hh"
#include "net/rdma/shard_check.hh"

#include <cstdlib>
#include <cstring>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

namespace shoal::net::rdma {

namespace internal {

namespace {
constexpr uint32_t pool_magic = 0x4c504853; // "SHPL"
constexpr uint32_t op_lease = 1;
constexpr uint32_t op_release = 2;
constexpr uint32_t status_ok = 0;

struct wire_request {
    uint32_t magic;
    uint32_t op;
    uint64_t arg;
};
static_assert(sizeof(wire_request) == 16);

struct wire_reply {
    uint32_t magic;
    uint32_t status;
    uint64_t id;
    uint64_t addr;
    uint64_t length;
    uint32_t rkey;
    uint32_t text_length;
};
static_assert(sizeof(wire_reply) == 40);

struct free_deleter {
    void operator()(char* p) const noexcept { std::free(p); }
};

net::temporary_buffer encode(const void* p, size_t n, const std::string& text = {}) {
    net::temporary_buffer b(n + text.size());
    std::memcpy(b.get_write(), p, n);
    if (!text.empty()) {
        std::memcpy(b.get_write() + n, text.data(), text.size());
    }
    return b;
}
} // namespace

/// The server's regions and clients; shared by the handle and the serving loops.
class remote_pool_server_state {
public:
    explicit remote_pool_server_state(remote_pool_options o)
        : _shard(this_shard_id())
        , _o(o) {}

    const remote_pool_stats& stats() const noexcept { return _stats; }
    const remote_pool_options& options() const noexcept { return _o; }

    static future<> serve(std::shared_ptr<remote_pool_server_state> self, connection c) {
        remote_pool_server_state& s = *self;
        SHOAL_RDMA_CHECK_SHARD(s._shard, "remote pool server");
        if (s._shut || !c) {
            co_return;
        }
        const uint64_t cid = ++s._next_conn;
        s._conns.emplace(cid, c);
        net::message_connection msgs = c.messages();
        std::optional<net::temporary_buffer> m;
        try {
            m = co_await msgs.receive();
        } catch (...) {
        }
        if (m && !s._shut) {
            peer_hello h;
            if (m->size() == sizeof(h)) {
                std::memcpy(&h, m->get(), sizeof(h));
            }
            if (m->size() == sizeof(h) && h.tag == peer_hello::magic) {
                co_await s.hold_data(msgs);
            } else {
                co_await s.serve_client(cid, msgs, std::move(*m));
            }
        }
        s._conns.erase(cid);
        c.close();
    }

    /// Closes every connection and revokes every region now.
    void shut() noexcept {
        _shut = true;
        for (auto& [id, cl] : _clients) {
            reclaim(cl);
        }
        _clients.clear();
        auto conns = std::move(_conns);
        for (auto& [id, c] : conns) {
            c.close();
        }
    }

private:
    struct region {
        std::unique_ptr<char, free_deleter> mem;
        exported_region exp; // revoked before mem is freed
        size_t size = 0;
    };
    struct client {
        std::unordered_map<uint64_t, region> regions;
        size_t bytes = 0;
    };

    future<> hold_data(net::message_connection& msgs) {
        ++_stats.data_connections;
        try {
            // A one-sided connection carries nothing after its hello; extra messages are ignored.
            for (;;) {
                std::optional<net::temporary_buffer> m = co_await msgs.receive();
                if (!m || _shut) {
                    break;
                }
            }
        } catch (...) {
        }
        --_stats.data_connections;
    }

    future<> serve_client(uint64_t cid, net::message_connection& msgs, net::temporary_buffer first) {
        ++_stats.clients;
        _clients.emplace(cid, client{});
        std::optional<net::temporary_buffer> m(std::move(first));
        try {
            while (m && !_shut) {
                net::temporary_buffer r = answer(cid, *m);
                co_await msgs.send(std::move(r));
                m = co_await msgs.receive();
            }
        } catch (...) {
        }
        // Released, disconnected or dead: every region it still holds is revoked and freed.
        if (auto it = _clients.find(cid); it != _clients.end()) {
            reclaim(it->second);
            _clients.erase(it);
        }
        --_stats.clients;
    }

    net::temporary_buffer answer(uint64_t cid, const net::temporary_buffer& m) {
        wire_request q{};
        if (m.size() != sizeof(q)) {
            return refuse(remote_pool_error::reason::bad_request,
                          fmt::format("a request of {} bytes (expected {})", m.size(), sizeof(q)));
        }
        std::memcpy(&q, m.get(), sizeof(q));
        if (q.magic != pool_magic) {
            return refuse(remote_pool_error::reason::bad_request, fmt::format("bad magic 0x{:x}", q.magic));
        }
        client& cl = _clients.at(cid);
        if (q.op == op_lease) {
            return lease(cl, q.arg);
        }
        if (q.op == op_release) {
            auto it = cl.regions.find(q.arg);
            if (it == cl.regions.end()) {
                return refuse(remote_pool_error::reason::unknown_lease,
                              fmt::format("this client holds no lease {}", q.arg));
            }
            drop(cl, it->second);
            cl.regions.erase(it);
            ++_stats.releases;
            wire_reply a{pool_magic, status_ok, q.arg, 0, 0, 0, 0};
            return encode(&a, sizeof(a));
        }
        return refuse(remote_pool_error::reason::bad_request, fmt::format("unknown operation {}", q.op));
    }

    net::temporary_buffer lease(client& cl, uint64_t size) {
        if (size == 0 || size > _o.max_lease) {
            return refuse(remote_pool_error::reason::bad_request,
                          fmt::format("a lease of {} bytes (1 to {} bytes per lease)", size, _o.max_lease));
        }
        if (cl.bytes + size > _o.client_quota) {
            ++_stats.quota_refusals;
            return refuse(remote_pool_error::reason::quota,
                          fmt::format("client quota of {} bytes: holds {}, asked for {} more",
                                      _o.client_quota, cl.bytes, size));
        }
        if (_stats.leased_bytes + size > _o.watermark) {
            ++_stats.watermark_refusals;
            return refuse(remote_pool_error::reason::watermark,
                          fmt::format("server watermark of {} bytes: {} leased, asked for {} more",
                                      _o.watermark, _stats.leased_bytes, size));
        }
        region rg;
        rg.size = size;
        const size_t rounded = (size + 4095) & ~size_t(4095);
        rg.mem.reset(static_cast<char*>(std::aligned_alloc(4096, rounded)));
        if (!rg.mem) {
            return refuse(remote_pool_error::reason::no_memory,
                          fmt::format("the server cannot allocate {} bytes", size));
        }
        // Zeroed: a lease never shows what the server's memory held before.
        std::memset(rg.mem.get(), 0, rounded);
        try {
            rg.exp = export_region(rg.mem.get(), size, access::remote_read | access::remote_write);
        } catch (const std::exception& e) {
            return refuse(remote_pool_error::reason::no_memory,
                          fmt::format("the server cannot register {} bytes: {}", size, e.what()));
        }
        const remote_region d = rg.exp.descriptor();
        const uint64_t id = ++_next_lease;
        cl.regions.emplace(id, std::move(rg));
        cl.bytes += size;
        ++_stats.regions;
        _stats.leased_bytes += size;
        ++_stats.leases;
        wire_reply a{pool_magic, status_ok, id, d.addr, d.length, d.rkey, 0};
        return encode(&a, sizeof(a));
    }

    net::temporary_buffer refuse(remote_pool_error::reason r, const std::string& what) {
        if (r == remote_pool_error::reason::bad_request) {
            ++_stats.bad_requests;
        }
        wire_reply a{pool_magic, uint32_t(r), 0, 0, 0, 0, uint32_t(what.size())};
        return encode(&a, sizeof(a), what);
    }

    /// Revokes and frees one region of `cl` (the caller erases it).
    void drop(client& cl, region& rg) noexcept {
        rg.exp.revoke();
        rg.mem.reset();
        cl.bytes -= rg.size;
        --_stats.regions;
        _stats.leased_bytes -= rg.size;
    }

    void reclaim(client& cl) noexcept {
        for (auto& [id, rg] : cl.regions) {
            drop(cl, rg);
            ++_stats.reclaimed;
        }
        cl.regions.clear();
    }

    unsigned _shard;
    remote_pool_options _o;
    remote_pool_stats _stats;
    std::unordered_map<uint64_t, client> _clients;
    std::unordered_map<uint64_t, connection> _conns;
    uint64_t _next_conn = 0;
    uint64_t _next_lease = 0;
    bool _shut = false;
};

} // namespace internal

// --- remote_pool_server

remote_pool_server::remote_pool_server(remote_pool_options o)
    : _s(std::make_shared<internal::remote_pool_server_state>(o)) {}
remote_pool_server::remote_pool_server(remote_pool_server&&) noexcept = default;
remote_pool_server& remote_pool_server::operator=(remote_pool_server&& o) noexcept {
    if (this != &o) {
        if (_s) {
            _s->shut();
        }
        _s = std::move(o._s);
    }
    return *this;
}
remote_pool_server::~remote_pool_server() {
    if (_s) {
        _s->shut();
    }
}
future<> remote_pool_server::serve(connection c) {
    return internal::remote_pool_server_state::serve(_s, std::move(c));
}
const remote_pool_stats& remote_pool_server::stats() const noexcept {
    return _s->stats();
}
const remote_pool_options& remote_pool_server::options() const noexcept {
    return _s->options();
}

// --- remote_pool_client

struct remote_pool_client::reply {
    internal::wire_reply head;
    std::string text;
};

remote_pool_client::remote_pool_client(peer& p, size_t region_size)
    : _peer(&p)
    , _region_size(region_size)
    , _one_at_a_time(std::make_unique<semaphore>(1)) {
    if (region_size == 0) {
        throw std::invalid_argument("remote_pool_client: region size 0");
    }
}

future<remote_pool_client::reply> remote_pool_client::request(uint32_t op, uint64_t arg) {
    semaphore_units units = co_await get_units(*_one_at_a_time);
    const internal::wire_request q{internal::pool_magic, op, arg};
    co_await _peer->messages().send(internal::encode(&q, sizeof(q)));
    std::optional<net::temporary_buffer> m = co_await _peer->messages().receive();
    if (!m) {
        throw connection_closed("remote pool: the server closed the control connection");
    }
    reply r;
    if (m->size() < sizeof(r.head)) {
        throw connection_closed(fmt::format("remote pool: protocol error: a reply of {} bytes", m->size()));
    }
    std::memcpy(&r.head, m->get(), sizeof(r.head));
    if (r.head.magic != internal::pool_magic || m->size() != sizeof(r.head) + r.head.text_length) {
        throw connection_closed(fmt::format("remote pool: protocol error: bad reply (magic 0x{:x}, {} bytes)",
                                            r.head.magic, m->size()));
    }
    r.text.assign(m->get() + sizeof(r.head), r.head.text_length);
    if (r.head.status != internal::status_ok) {
        throw remote_pool_error(remote_pool_error::reason(r.head.status), "remote pool: refused: " + r.text);
    }
    co_return r;
}

future<remote_lease> remote_pool_client::lease(size_t size) {
    reply r = co_await request(internal::op_lease, size);
    if (r.head.length != size) {
        throw connection_closed(
            fmt::format("remote pool: protocol error: asked for {} bytes, got {}", size, r.head.length));
    }
    remote_lease l{remote_region{r.head.addr, r.head.rkey, r.head.length}, r.head.id};
    _leases.push_back(l);
    co_return l;
}

future<> remote_pool_client::release(const remote_lease& l) {
    const remote_lease copy = l; // `l` may be an element of _leases
    co_await request(internal::op_release, copy.id);
    std::erase_if(_leases, [&](const remote_lease& x) { return x.id == copy.id; });
    if (_current == copy.region) {
        _current = {};
        _used = 0;
    }
}

future<remote_region> remote_pool_client::allocate(size_t size, size_t align) {
    if (size == 0 || align == 0 || (align & (align - 1)) != 0) {
        throw std::invalid_argument(
            fmt::format("remote_pool_client::allocate: {} bytes aligned to {}", size, align));
    }
    uint64_t at = (_current.addr + _used + align - 1) & ~uint64_t(align - 1);
    if (_current.length == 0 || at + size > _current.addr + _current.length) {
        remote_lease l = co_await lease(std::max(_region_size, size + align - 1));
        _current = l.region;
        _used = 0;
        at = (_current.addr + align - 1) & ~uint64_t(align - 1);
    }
    _used = at + size - _current.addr;
    co_return remote_region{at, _current.rkey, size};
}

size_t remote_pool_client::leased_bytes() const noexcept {
    size_t n = 0;
    for (const auto& l : _leases) {
        n += l.region.length;
    }
    return n;
}

} // namespace shoal::net::rdma
