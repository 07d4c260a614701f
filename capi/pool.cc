// shoal_pool_* and shoal_lease_*: the remote memory pool's client (net/rdma/services/remote_pool.hh)
// behind the C ABI. A pool handle lives on one shard with its peer connections; its leases
// live on the same shard.

#include "capi/async.hh"
#include "capi/buffer.hh"
#include "capi/shard_handle.hh"
#include "capi/status.hh"
#include "core/coroutine.hh"
#include "net/rdma/context.hh"
#include "net/rdma/services/peer.hh"
#include "net/rdma/services/remote_pool.hh"
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

/// Checks `l` (see check_handle) and that [offset, offset + size) lies inside it.
int check(const shoal_lease* l, uint64_t offset, size_t size, const char* what, bool blocking = true) {
    if (int rc = check_handle(l ? l->state.get() : nullptr, what, "lease", blocking); rc != SHOAL_OK) {
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

/// The _async form of a read or write of [offset, offset + size) of `l`: checked here (no
/// blocking check), `fn(lease state)` returning a future<> runs on the shard, `done` reports it.
template <typename Fn>
int lease_async(shoal_lease* l, uint64_t offset, size_t size, shoal_done_cb done, void* user,
                const char* what, Fn fn) {
    if (int rc = check(l, offset, size, what, false); rc != SHOAL_OK) {
        return rc;
    }
    if (!done) {
        return fail(SHOAL_EINVAL, std::string(what) + ": NULL callback");
    }
    return start_async_done(l->state, what, std::move(fn), done, user);
}

/// A transfer without a copy between [offset, offset + size) of `l` and `size` bytes at
/// `buf_offset` of `buf` (`write`: into the lease), checked here and handed to the lease's shard
/// by `run(fn)`, blocking or not. The span is taken on the shard and holds the memory until the
/// transfer completed: work handed to a shard runs in order, so a shoal_buffer_free made after
/// the call returned comes after it.
template <typename Run>
int buffer_transfer(shoal_lease* l, uint64_t offset, const shoal_buffer* buf, size_t buf_offset, size_t size,
                    bool write, bool blocking, const char* what, Run run) {
    if (int rc = check(l, offset, size, what, blocking); rc != SHOAL_OK) {
        return rc;
    }
    int rc;
    auto b = usable_buffer(buf, l->state->shard(), buf_offset, size, what, rc);
    if (!b) {
        return rc;
    }
    return run([=](lease_state& s) {
        auto& client = s.pool().client();
        auto span = b->span(buf_offset, size);
        return write ? client.remote_write(std::move(span), s.region(), offset)
                     : client.remote_read(std::move(span), s.region(), offset);
    });
}

/// A lease granted to `ps` as a new handle in `*out`, tracked by the runtime (SHOAL_ECLOSED,
/// the lease given back, when the runtime is stopping).
int new_lease(const std::shared_ptr<pool_state>& ps, const rdma::remote_lease& l, const char* what,
              shoal_lease** out) {
    auto st = std::make_shared<lease_state>(ps, l);
    if (int rc = track_opened(ps->runtime(), st, what); rc != SHOAL_OK) {
        return rc;
    }
    *out = new shoal_lease{std::move(st)};
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
        if (int rc = check_rdma_shard(rt, shard, "shoal_pool_connect"); rc != SHOAL_OK) {
            return rc;
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
        return new_lease(ps, l, "shoal_pool_lease", out);
    });
}

int shoal_pool_lease_async(shoal_pool* pool, size_t size, shoal_lease_cb done, void* user) {
    return guarded([&] {
        if (int rc = check(pool, "shoal_pool_lease_async", false); rc != SHOAL_OK) {
            return rc;
        }
        if (!done) {
            return fail(SHOAL_EINVAL, "shoal_pool_lease_async: NULL callback");
        }
        if (size == 0) {
            return fail(SHOAL_EINVAL, "shoal_pool_lease_async: size 0");
        }
        using leased = async_result<rdma::remote_lease>;
        auto ps = pool->state;
        return start_async(
            ps, "shoal_pool_lease_async",
            [size](pool_state& p) {
                return p.client().lease(size).then([](rdma::remote_lease l) {
                    return leased{SHOAL_OK, {}, l};
                });
            },
            [ps, done, user](int status, const char* error, leased* r) {
                shoal_lease* lease = nullptr;
                if (status == SHOAL_OK && r) {
                    status =
                        guarded([&] { return new_lease(ps, r->value, "shoal_pool_lease_async", &lease); });
                    error = status == SHOAL_OK ? nullptr : shoal_last_error();
                }
                done(user, status, lease, error);
            });
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
        return buffer_transfer(lease, offset, buf, buf_offset, size, true, true, "shoal_lease_write_buffer",
                               [&](auto fn) { return on_lease_shard(lease, fn); });
    });
}

int shoal_lease_read_buffer(shoal_lease* lease, uint64_t offset, shoal_buffer* buf, size_t buf_offset,
                            size_t size) {
    return guarded([&] {
        return buffer_transfer(lease, offset, buf, buf_offset, size, false, true, "shoal_lease_read_buffer",
                               [&](auto fn) { return on_lease_shard(lease, fn); });
    });
}

int shoal_lease_write_async(shoal_lease* lease, uint64_t offset, const void* data, size_t size,
                            shoal_done_cb done, void* user) {
    return guarded([&] {
        if (!data && size) {
            return fail(SHOAL_EINVAL, "shoal_lease_write_async: NULL data");
        }
        auto copy = std::make_shared<std::string>(static_cast<const char*>(data ? data : ""), size);
        return lease_async(lease, offset, size, done, user, "shoal_lease_write_async", [=](lease_state& l) {
            return l.write_copy(offset, copy->data(), copy->size()).finally([copy] {});
        });
    });
}

int shoal_lease_read_async(shoal_lease* lease, uint64_t offset, void* out, size_t size, shoal_done_cb done,
                           void* user) {
    return guarded([&] {
        if (!out && size) {
            return fail(SHOAL_EINVAL, "shoal_lease_read_async: NULL output buffer");
        }
        char* dst = static_cast<char*>(out);
        return lease_async(lease, offset, size, done, user, "shoal_lease_read_async",
                           [=](lease_state& l) { return l.read_copy(offset, dst, size); });
    });
}

int shoal_lease_write_buffer_async(shoal_lease* lease, uint64_t offset, const shoal_buffer* buf,
                                   size_t buf_offset, size_t size, shoal_done_cb done, void* user) {
    return guarded([&] {
        const char* what = "shoal_lease_write_buffer_async";
        return buffer_transfer(lease, offset, buf, buf_offset, size, true, false, what, [&](auto fn) {
            return lease_async(lease, offset, size, done, user, what, std::move(fn));
        });
    });
}

int shoal_lease_read_buffer_async(shoal_lease* lease, uint64_t offset, shoal_buffer* buf, size_t buf_offset,
                                  size_t size, shoal_done_cb done, void* user) {
    return guarded([&] {
        const char* what = "shoal_lease_read_buffer_async";
        return buffer_transfer(lease, offset, buf, buf_offset, size, false, false, what, [&](auto fn) {
            return lease_async(lease, offset, size, done, user, what, std::move(fn));
        });
    });
}

int shoal_lease_release(shoal_lease* lease) {
    return close_handle(lease ? lease->state.get() : nullptr, "shoal_lease_release", "lease");
}

int shoal_lease_release_async(shoal_lease* lease, shoal_done_cb done, void* user) {
    return guarded([&] {
        if (!lease) {
            return fail(SHOAL_EINVAL, "shoal_lease_release_async: NULL lease");
        }
        if (!done) {
            return fail(SHOAL_EINVAL, "shoal_lease_release_async: NULL callback");
        }
        // Idempotent like shoal_lease_release: a lease closed already reports SHOAL_OK.
        auto st = lease->state;
        const bool first = st->begin_close();
        int rc = start_async_done(
            st, "shoal_lease_release_async",
            [first](lease_state& l) { return first ? l.finish_close() : make_ready_future<>(); }, done, user);
        if (rc != SHOAL_OK && first) {
            st->close_refused();
        }
        return rc;
    });
}

void shoal_lease_destroy(shoal_lease* lease) {
    destroy(lease);
}

} // extern "C"
