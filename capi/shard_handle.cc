#include "capi/shard_handle.hh"

#include "capi/status.hh"
#include "core/alien.hh"
#include "shoal/shoal_c.h"

#include <string>

namespace shoal::capi {

void shard_handle::close() noexcept {
    if (!begin_close()) {
        return;
    }
    auto f = _rt->engine().submit(_shard, [this] { return close_on_shard(); });
    try {
        f.get();
    } catch (...) {
        abandon();
    }
    _rt->forget(this);
}

void shard_handle::close_later() noexcept {
    if (!begin_close()) {
        return;
    }
    // submit, not post: stopping the engine waits for the close. The std::future is dropped;
    // the function (holding the state) lives until the close is done.
    try {
        (void)_rt->engine().submit(_shard, [self = shared_from_this()] { return self->finish_close(); });
    } catch (...) {
        close_refused();
    }
}

future<> shard_handle::finish_close() noexcept {
    return close_on_shard().finally([self = shared_from_this()] { self->_rt->forget(self.get()); });
}

void shard_handle::close_refused() noexcept {
    abandon();
    _rt->forget(this);
}

int check_handle(const shard_handle* h, const char* what, const char* kind, bool blocking) {
    if (!h) {
        return fail(SHOAL_EINVAL, std::string(what) + ": NULL " + kind);
    }
    if (h->closed()) {
        return fail(SHOAL_ECLOSED, std::string(what) + ": the " + kind + " is closed");
    }
    if (blocking) {
        check_blocking_allowed();
    }
    return SHOAL_OK;
}

int close_handle(shard_handle* h, const char* what, const char* kind) {
    return guarded([&] {
        if (!h) {
            return fail(SHOAL_EINVAL, std::string(what) + ": NULL " + kind);
        }
        if (!h->closed()) {
            check_blocking_allowed();
        }
        h->close();
        return int(SHOAL_OK);
    });
}

void close_for_destroy(shard_handle& h) noexcept {
    if (alien::on_engine_thread()) {
        h.close_later(); // inside a callback: the close runs after it returns
    } else {
        h.close();
    }
}

int track_opened(runtime_state& rt, const std::shared_ptr<shard_handle>& h, const char* what) {
    if (!rt.track(h)) {
        close_for_destroy(*h); // without waiting for itself on a shard thread (a callback)
        return fail(SHOAL_ECLOSED, std::string(what) + ": the runtime is stopping");
    }
    return SHOAL_OK;
}

int check_shard(const shoal_runtime* rt, unsigned shard, const char* what) {
    if (!rt) {
        return fail(SHOAL_EINVAL, std::string(what) + ": NULL runtime");
    }
    if (!rt->state->engine().running()) {
        return fail(SHOAL_ECLOSED, std::string(what) + ": the runtime is stopped");
    }
    if (shard >= rt->state->engine().shards()) {
        return fail(SHOAL_EINVAL, std::string(what) + ": no shard " + std::to_string(shard) +
                                      " in a runtime of " + std::to_string(rt->state->engine().shards()));
    }
    return SHOAL_OK;
}

int check_rdma_shard(const shoal_runtime* rt, unsigned shard, const char* what) {
    if (int rc = check_shard(rt, shard, what); rc != SHOAL_OK) {
        return rc;
    }
    if (!rt->state->rdma()) {
        return fail(SHOAL_EUNAVAILABLE, std::string(what) + ": the runtime was started without rdma");
    }
    return SHOAL_OK;
}

} // namespace shoal::capi
