// shoal_pool_* and shoal_lease_*: the remote memory pool's client (net/rdma/remote_pool.hh)
// behind the C ABI. A pool handle lives on one shard with its peer connections; its leases
// live on the same shard.

#include "capi/buffer.hh"
#include "capi/shard_handle.hh"
#include "capi/status.hh"
#include "core/coroutine.hh"
#include "net/rdma/context.hh"
#include "net/rdma/peer.hh"
#include "net/rdma/remote_pool.hh"
#include "net/socket_address.hh"
#include "shoal/shoal_c.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

using namespace shoal;
using namespace shoal::capi;
namespace rdma = shoal::net::rdma;

namespace {

/// The connections to a pool server and the client speaking its protocol.
class pool_state final : public shard_handle {
public:
    using shard_handle::shard_handle;

    /// Connects (on the shard).
    future<> connect_on_shard(net::socket_address addr, unsigned timeout_ms) {
        rdma::connection_options o = rdma::shard_context::local().opts().connection;
        if (timeout_ms) {
            o.connect_timeout = std::chrono::milliseconds(timeout_ms);
            o.resolve_timeout = std::min(o.resolve_timeout, std::chrono::milliseconds(timeout_ms));
        }
        _peer = std::make_unique<rdma::peer>(co_await rdma::peer::connect(addr, 2, o));
        _client = std::make_unique<rdma::remote_pool_client>(*_peer);
    }

    /// On the shard: the client, or closed_error once closed.
    rdma::remote_pool_client& client() {
        if (!_client) {
            throw closed_error("the pool is closed");
        }
        return *_client;
    }

private:
    future<> close_on_shard() noexcept override {
        _client.reset();
        if (_peer) {
            _peer->close(); // the server takes every lease of this client back
            _peer.reset();
        }
        return make_ready_future<>();
    }

    void abandon() noexcept override {
        (void)_client.release();
        (void)_peer.release();
    }

    std::unique_ptr<rdma::peer> _peer;
    std::unique_ptr<rdma::remote_pool_client> _client;
};

/// A leased region of a pool (on the pool's shard).
class lease_state final : public shard_handle {
public:
    lease_state(std::shared_ptr<pool_state> pool, rdma::remote_lease l)
        : shard_handle(pool->runtime_ptr(), pool->shard())
        , _pool(std::move(pool))
        , _lease(l) {}

    size_t size() const noexcept { return _lease.region.length; }
    pool_state& pool() noexcept { return *_pool; }

    /// On the shard: the region, or closed_error once released or its pool closed.
    const rdma::remote_region& region() {
        if (_released || _pool->closed()) {
            throw closed_error(_released ? "the lease was released" : "the lease's pool is closed");
        }
        return _lease.region;
    }

    /// Copies `size` bytes of `data` to `offset`, through pool buffers of at most 1 MiB.
    future<> write_copy(uint64_t offset, const char* data, size_t size) {
        const auto dst = region();
        auto& pool = rdma::shard_context::local().pool();
        const size_t chunk = std::min(size, pool.max_buffer_size());
        rdma::buffer buf = pool.allocate(std::max<size_t>(chunk, 1));
        for (size_t done = 0; done < size; done += chunk) {
            const size_t n = std::min(chunk, size - done);
            std::memcpy(buf.data(), data + done, n);
            co_await _pool->client().remote_write(rdma::span_of(buf, 0, n), dst, offset + done);
        }
    }

    /// Copies `size` bytes at `offset` into `out`, through pool buffers of at most 1 MiB.
    future<> read_copy(uint64_t offset, char* out, size_t size) {
        const auto src = region();
        auto& pool = rdma::shard_context::local().pool();
        const size_t chunk = std::min(size, pool.max_buffer_size());
        rdma::buffer buf = pool.allocate(std::max<size_t>(chunk, 1));
        for (size_t done = 0; done < size; done += chunk) {
            const size_t n = std::min(chunk, size - done);
            co_await _pool->client().remote_read(rdma::span_of(buf, 0, n), src, offset + done);
            std::memcpy(out + done, buf.data(), n);
        }
    }

private:
    future<> close_on_shard() noexcept override {
        if (_released || _pool->closed()) {
            return make_ready_future<>();
        }
        _released = true;
        return _pool->client().release(_lease).handle_exception([](std::exception_ptr) {
            // The server forgot it already (its connection broke): nothing left to give back.
        });
    }

    void abandon() noexcept override {}

    std::shared_ptr<pool_state> _pool;
    rdma::remote_lease _lease;
    bool _released = false;
};

} // namespace

/// The C handles.
struct shoal_pool {
    std::shared_ptr<pool_state> state;
};
struct shoal_lease {
    std::shared_ptr<lease_state> state;
};

namespace {

int check(const shoal_pool* p, const char* what, bool blocking) {
    return check_handle(p ? p->state.get() : nullptr, what, "pool", blocking);
}

/// Checks `l` and that [offset, offset + size) lies inside it.
int check(const shoal_lease* l, uint64_t offset, size_t size, const char* what) {
    if (int rc = check_handle(l ? l->state.get() : nullptr, what, "lease", true); rc != SHOAL_OK) {
        return rc;
    }
    if (l->state->pool().closed()) {
        return fail(SHOAL_ECLOSED, std::string(what) + ": the lease's pool is closed");
    }
    if (offset > l->state->size() || size > l->state->size() - offset) {
        return fail(SHOAL_EINVAL, std::string(what) + ": " + std::to_string(size) + " bytes at offset " +
                                      std::to_string(offset) + " of a " + std::to_string(l->state->size()) +
                                      "-byte lease");
    }
    return SHOAL_OK;
}

/// Runs `fn(lease state)` (returning a future) on the lease's shard and waits for it.
template <typename Fn>
int on_lease_shard(shoal_lease* l, Fn fn) {
    auto st = l->state;
    st->runtime().engine().submit(st->shard(), [st, fn] { return fn(*st); }).get();
    return SHOAL_OK;
}

template <typename Handle>
void destroy(Handle* h) {
    if (h) {
        close_for_destroy(*h->state);
        delete h;
    }
}

} // namespace

extern "C" {

int shoal_pool_connect(shoal_runtime* rt, unsigned shard, const char* address, unsigned timeout_ms,
                       shoal_pool** out) {
    return guarded([&] {
        if (!out) {
            return fail(SHOAL_EINVAL, "shoal_pool_connect: out is NULL");
        }
        *out = nullptr;
        if (int rc = check_shard(rt, shard, "shoal_pool_connect"); rc != SHOAL_OK) {
            return rc;
        }
        if (!rt->state->rdma()) {
            return fail(SHOAL_EUNAVAILABLE, "shoal_pool_connect: the runtime was started without rdma");
        }
        if (!address) {
            return fail(SHOAL_EINVAL, "shoal_pool_connect: NULL address");
        }
        check_blocking_allowed();
        auto addr = net::socket_address::parse(address);
        auto st = std::make_shared<pool_state>(rt->state, shard);
        rt->state->engine()
            .submit(shard, [st, addr, timeout_ms] { return st->connect_on_shard(addr, timeout_ms); })
            .get();
        if (int rc = track_opened(*rt->state, st, "shoal_pool_connect"); rc != SHOAL_OK) {
            return rc;
        }
        *out = new shoal_pool{std::move(st)};
        return int(SHOAL_OK);
    });
}

int shoal_pool_lease(shoal_pool* pool, size_t size, shoal_lease** out) {
    return guarded([&] {
        if (!out) {
            return fail(SHOAL_EINVAL, "shoal_pool_lease: out is NULL");
        }
        *out = nullptr;
        if (int rc = check(pool, "shoal_pool_lease", true); rc != SHOAL_OK) {
            return rc;
        }
        if (size == 0) {
            return fail(SHOAL_EINVAL, "shoal_pool_lease: size 0");
        }
        auto ps = pool->state;
        auto l =
            ps->runtime().engine().submit(ps->shard(), [ps, size] { return ps->client().lease(size); }).get();
        auto st = std::make_shared<lease_state>(ps, l);
        if (int rc = track_opened(ps->runtime(), st, "shoal_pool_lease"); rc != SHOAL_OK) {
            return rc;
        }
        *out = new shoal_lease{std::move(st)};
        return int(SHOAL_OK);
    });
}

int shoal_pool_close(shoal_pool* pool) {
    return close_handle(pool ? pool->state.get() : nullptr, "shoal_pool_close", "pool");
}

void shoal_pool_destroy(shoal_pool* pool) {
    destroy(pool);
}

size_t shoal_lease_size(const shoal_lease* lease) {
    return lease ? lease->state->size() : 0;
}

int shoal_lease_write(shoal_lease* lease, uint64_t offset, const void* data, size_t size) {
    return guarded([&] {
        if (!data && size) {
            return fail(SHOAL_EINVAL, "shoal_lease_write: NULL data");
        }
        if (int rc = check(lease, offset, size, "shoal_lease_write"); rc != SHOAL_OK) {
            return rc;
        }
        const char* src = static_cast<const char*>(data);
        return on_lease_shard(lease, [=](lease_state& l) { return l.write_copy(offset, src, size); });
    });
}

int shoal_lease_read(shoal_lease* lease, uint64_t offset, void* out, size_t size) {
    return guarded([&] {
        if (!out && size) {
            return fail(SHOAL_EINVAL, "shoal_lease_read: NULL output buffer");
        }
        if (int rc = check(lease, offset, size, "shoal_lease_read"); rc != SHOAL_OK) {
            return rc;
        }
        char* dst = static_cast<char*>(out);
        return on_lease_shard(lease, [=](lease_state& l) { return l.read_copy(offset, dst, size); });
    });
}

int shoal_lease_write_buffer(shoal_lease* lease, uint64_t offset, const shoal_buffer* buf, size_t buf_offset,
                             size_t size) {
    return guarded([&] {
        if (int rc = check(lease, offset, size, "shoal_lease_write_buffer"); rc != SHOAL_OK) {
            return rc;
        }
        int rc;
        auto b = usable_buffer(buf, lease->state->shard(), buf_offset, size, "shoal_lease_write_buffer", rc);
        if (!b) {
            return rc;
        }
        return on_lease_shard(lease, [=](lease_state& l) {
            return l.pool().client().remote_write(b->span(buf_offset, size), l.region(), offset);
        });
    });
}

int shoal_lease_read_buffer(shoal_lease* lease, uint64_t offset, shoal_buffer* buf, size_t buf_offset,
                            size_t size) {
    return guarded([&] {
        if (int rc = check(lease, offset, size, "shoal_lease_read_buffer"); rc != SHOAL_OK) {
            return rc;
        }
        int rc;
        auto b = usable_buffer(buf, lease->state->shard(), buf_offset, size, "shoal_lease_read_buffer", rc);
        if (!b) {
            return rc;
        }
        return on_lease_shard(lease, [=](lease_state& l) {
            return l.pool().client().remote_read(b->span(buf_offset, size), l.region(), offset);
        });
    });
}

int shoal_lease_release(shoal_lease* lease) {
    return close_handle(lease ? lease->state.get() : nullptr, "shoal_lease_release", "lease");
}

void shoal_lease_destroy(shoal_lease* lease) {
    destroy(lease);
}

} // extern "C"
