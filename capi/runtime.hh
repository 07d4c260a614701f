#pragma once

// The runtime behind a shoal_runtime handle: a background engine and the clients opened on it,
// so that stopping the runtime closes them first.

#include "core/alien.hh"

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace shoal::capi {

/// Something opened on a runtime that must be closed before its shards stop.
class closable {
public:
    virtual ~closable() = default;
    /// Closes it (blocking; called from a host thread).
    virtual void close() noexcept = 0;
};

/// A running engine and the handles opened on it. Shared by the runtime handle and every
/// handle opened on it, so a client may outlive its runtime handle (as a closed handle).
class runtime_state {
public:
    /// Starts the shards, and RDMA on every shard when `rdma` (throws rdma_error without a
    /// device, after stopping the shards again).
    runtime_state(smp_options opts, bool rdma);

    /// The engine (its `submit`/`post` refuse work once stopped).
    alien::engine& engine() noexcept { return _engine; }
    /// True when RDMA was started on every shard.
    bool rdma() const noexcept { return _rdma; }
    /// Tracks `c` until `forget(c)`; false when the runtime is stopping (`c` is not tracked).
    bool track(std::weak_ptr<closable> c);
    /// Stops tracking `c`.
    void forget(const closable* c);
    /// Closes every tracked handle, then stops the engine. Idempotent.
    void stop();

private:
    alien::engine _engine;
    std::mutex _mutex;
    std::vector<std::weak_ptr<closable>> _open;
    bool _stopping = false;
    bool _rdma = false;
};

/// Fails with SHOAL_ESTATE when called on a shard thread, where blocking would deadlock.
void check_blocking_allowed();

} // namespace shoal::capi

/// The C handle: a hold on the runtime.
struct shoal_runtime {
    std::shared_ptr<shoal::capi::runtime_state> state;
};
