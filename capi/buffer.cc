// shoal_buffer_*: buffers of a shard's registered RDMA pool behind the C ABI.

#include "capi/buffer.hh"

#include "capi/status.hh"
#include "net/rdma/context.hh"
#include "shoal/shoal_c.h"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace shoal::capi {

void buffer_state::allocate(size_t size) {
    auto f = _rt->engine().submit(_shard, [this, size] {
        auto& pool = net::rdma::shard_context::local().pool();
        if (size > pool.max_buffer_size()) {
            throw std::invalid_argument("shoal_buffer_alloc: " + std::to_string(size) +
                                        " bytes exceed the largest pool buffer (" +
                                        std::to_string(pool.max_buffer_size()) + ")");
        }
        _buf = pool.allocate(size);
        _size = size;
        _data.store(_buf.data(), std::memory_order_release);
    });
    f.get();
}

net::rdma::local_span buffer_state::span(size_t offset, size_t len) const {
    if (!_buf) {
        throw std::logic_error("the shoal buffer was freed");
    }
    return net::rdma::span_of(_buf, offset, len);
}

net::rdma::buffer& buffer_state::pool_buffer() {
    if (!_buf) {
        throw closed_error("the shoal buffer was freed");
    }
    return _buf;
}

future<> buffer_state::close_on_shard() noexcept {
    _data.store(nullptr, std::memory_order_release);
    _buf.reset();
    return make_ready_future<>();
}

void buffer_state::abandon() noexcept {
    // The shards are gone and their pools with them: the buffer must not be dropped here (it
    // would reach for its pool). Its small handle is leaked instead.
    _data.store(nullptr, std::memory_order_release);
    (void)new net::rdma::buffer(std::move(_buf));
}

std::shared_ptr<buffer_state> usable_buffer(const shoal_buffer* b, unsigned shard, size_t offset, size_t len,
                                            const char* what, int& rc) {
    rc = SHOAL_OK;
    if (!b) {
        rc = fail(SHOAL_EINVAL, std::string(what) + ": NULL buffer");
        return nullptr;
    }
    const auto& st = b->state;
    if (st->closed() || !st->data()) {
        rc = fail(SHOAL_ECLOSED, std::string(what) + ": the buffer was freed (or its runtime stopped)");
        return nullptr;
    }
    if (st->shard() != shard) {
        rc = fail(SHOAL_EINVAL, std::string(what) + ": the buffer belongs to shard " +
                                    std::to_string(st->shard()) + ", the handle to shard " +
                                    std::to_string(shard));
        return nullptr;
    }
    if (offset > st->size() || len > st->size() - offset || len > UINT32_MAX) {
        rc = fail(SHOAL_EINVAL, std::string(what) + ": " + std::to_string(len) + " bytes at offset " +
                                    std::to_string(offset) + " of a " + std::to_string(st->size()) +
                                    "-byte buffer");
        return nullptr;
    }
    return st;
}

} // namespace shoal::capi

using namespace shoal;
using namespace shoal::capi;

extern "C" {

int shoal_buffer_alloc(shoal_runtime* rt, unsigned shard, size_t size, shoal_buffer** out) {
    return guarded([&] {
        if (!out) {
            return fail(SHOAL_EINVAL, "shoal_buffer_alloc: out is NULL");
        }
        *out = nullptr;
        if (int rc = check_rdma_shard(rt, shard, "shoal_buffer_alloc"); rc != SHOAL_OK) {
            return rc;
        }
        if (size == 0) {
            return fail(SHOAL_EINVAL, "shoal_buffer_alloc: size 0");
        }
        check_blocking_allowed();
        auto st = std::make_shared<buffer_state>(rt->state, shard);
        st->allocate(size);
        if (int rc = track_opened(*rt->state, st, "shoal_buffer_alloc"); rc != SHOAL_OK) {
            return rc;
        }
        *out = new shoal_buffer{std::move(st)};
        return int(SHOAL_OK);
    });
}

void shoal_buffer_free(shoal_buffer* buf) {
    if (buf) {
        close_for_destroy(*buf->state);
        delete buf;
    }
}

void* shoal_buffer_data(const shoal_buffer* buf) {
    return buf ? buf->state->data() : nullptr;
}

size_t shoal_buffer_size(const shoal_buffer* buf) {
    return buf && buf->state->data() ? buf->state->size() : 0;
}

} // extern "C"
