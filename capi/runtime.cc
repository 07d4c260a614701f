#include "capi/runtime.hh"

#include "capi/status.hh"
#include "net/rdma/context.hh"
#include "shoal/shoal_c.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <stdexcept>

namespace shoal::capi {

runtime_state::runtime_state(smp_options opts, bool rdma)
    : _engine(std::move(opts)) {
    if (rdma) {
        try {
            _engine.submit(0, [] { return net::rdma::start(); }).get();
        } catch (...) {
            _engine.stop();
            throw;
        }
        _rdma = true;
    }
}

bool runtime_state::track(std::weak_ptr<closable> c) {
    std::lock_guard lock(_mutex);
    if (_stopping) {
        return false;
    }
    std::erase_if(_open, [](const auto& w) { return w.expired(); });
    _open.push_back(std::move(c));
    return true;
}

void runtime_state::forget(const closable* c) {
    std::lock_guard lock(_mutex);
    std::erase_if(_open, [c](const auto& w) {
        auto p = w.lock();
        return !p || p.get() == c;
    });
}

void runtime_state::stop() {
    std::vector<std::weak_ptr<closable>> open;
    bool first;
    {
        std::lock_guard lock(_mutex);
        first = !_stopping;
        _stopping = true;
        open.swap(_open);
    }
    for (auto& w : open) {
        if (auto c = w.lock()) {
            c->close();
        }
    }
    if (first && _rdma) {
        try {
            _engine.submit(0, [] { return net::rdma::stop(); }).get();
        } catch (...) {
            // Stopping the shards below frees what is left; nothing more to do for the caller.
        }
    }
    _engine.stop();
}

/// Thrown where a blocking call would wait for the thread it runs on.
class blocking_on_shard : public std::logic_error {
public:
    blocking_on_shard()
        : std::logic_error("a blocking shoal call on a shoal shard thread (in a callback?) would deadlock: "
                           "use the _async form") {}
};

void check_blocking_allowed() {
    if (alien::on_engine_thread()) {
        throw blocking_on_shard();
    }
}

} // namespace shoal::capi

using namespace shoal;
using namespace shoal::capi;

extern "C" {

void shoal_runtime_options_init(shoal_runtime_options* opts) {
    if (opts) {
        *opts = shoal_runtime_options{};
        opts->struct_size = sizeof(shoal_runtime_options);
        opts->shards = 1;
        opts->pin = 0;
        opts->rdma = 0;
    }
}

int shoal_runtime_start(const shoal_runtime_options* opts, shoal_runtime** out) {
    return guarded([&] {
        if (!out) {
            return fail(SHOAL_EINVAL, "shoal_runtime_start: out is NULL");
        }
        *out = nullptr;
        shoal_runtime_options o;
        shoal_runtime_options_init(&o);
        if (opts) {
            if (opts->struct_size < sizeof(size_t) + sizeof(unsigned) + sizeof(int) ||
                opts->struct_size > sizeof(shoal_runtime_options)) {
                return fail(SHOAL_EINVAL,
                            "shoal_runtime_start: options not set up with shoal_runtime_options_init");
            }
            o = *opts;
        }
        if (o.shards == 0 || o.shards > 1024) {
            return fail(SHOAL_EINVAL,
                        "shoal_runtime_start: shards must be 1 to 1024, not " + std::to_string(o.shards));
        }
        check_blocking_allowed();
        smp_options smp;
        smp.smp = o.shards;
        smp.pin = o.pin != 0;
        auto state = std::make_shared<runtime_state>(smp, o.rdma != 0);
        *out = new shoal_runtime{std::move(state)};
        return int(SHOAL_OK);
    });
}

int shoal_runtime_stop(shoal_runtime* rt) {
    return guarded([&] {
        if (!rt) {
            return fail(SHOAL_EINVAL, "shoal_runtime_stop: NULL runtime");
        }
        check_blocking_allowed();
        rt->state->stop();
        return int(SHOAL_OK);
    });
}

void shoal_runtime_destroy(shoal_runtime* rt) {
    if (!rt) {
        return;
    }
    (void)shoal_runtime_stop(rt);
    delete rt;
}

unsigned shoal_runtime_shards(const shoal_runtime* rt) {
    return rt ? rt->state->engine().shards() : 0;
}

} // extern "C"
