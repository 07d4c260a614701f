#pragma once

// What every C handle that lives on one shard shares: its runtime, its shard, the closed flag,
// and closing it from a host thread (blocking) or from a shard thread (inside a callback).

#include "capi/runtime.hh"
#include "core/future.hh"

#include <atomic>
#include <memory>

namespace shoal::capi {

/// State of a handle whose C++ object lives on one shard of a runtime. Shared by the C handle
/// and the work in flight for it; everything but the flag is touched on the shard only.
class shard_handle : public closable, public std::enable_shared_from_this<shard_handle> {
public:
    /// A handle on `shard` of `rt`.
    shard_handle(std::shared_ptr<runtime_state> rt, unsigned shard) noexcept
        : _rt(std::move(rt))
        , _shard(shard) {}

    /// The runtime it was opened on.
    runtime_state& runtime() noexcept { return *_rt; }
    /// The same runtime, shared.
    const std::shared_ptr<runtime_state>& runtime_ptr() const noexcept { return _rt; }
    /// The shard its object lives on.
    unsigned shard() const noexcept { return _shard; }
    /// True once closing began (calls are refused from then on).
    bool closed() const noexcept { return _closed.load(std::memory_order_acquire); }

    /// Closes it from a host thread and waits for the end. Idempotent.
    void close() noexcept override;
    /// Closes it from a shard thread (a callback): marks it closed and hands the close to its
    /// shard without waiting; the state lives until that close is done. Idempotent.
    void close_later() noexcept;
    /// Marks it closed (later calls are refused); true for the one call that did, which must
    /// then close it: with `finish_close` on its shard, or `close_refused` when the engine
    /// refused that work.
    bool begin_close() noexcept { return !_closed.exchange(true, std::memory_order_acq_rel); }
    /// On its shard, after `begin_close` returned true: closes it and stops tracking it.
    future<> finish_close() noexcept;
    /// After `begin_close` returned true, when its shard is gone: lets go of its objects.
    void close_refused() noexcept;

protected:
    /// Closes the object on its shard (called once).
    virtual future<> close_on_shard() noexcept = 0;
    /// The engine stopped before `close_on_shard` could run: let go of the shard's objects
    /// without touching them (their shard is gone).
    virtual void abandon() noexcept = 0;

    std::shared_ptr<runtime_state> _rt;
    unsigned _shard;

private:
    std::atomic<bool> _closed{false};
};

/// Fails with SHOAL_EINVAL for a NULL handle and SHOAL_ECLOSED for a closed one, and (when
/// `blocking`) with SHOAL_ESTATE on a shard thread; SHOAL_OK otherwise. `what` names the call.
int check_handle(const shard_handle* h, const char* what, const char* kind, bool blocking);

/// The body of a _close function: SHOAL_EINVAL for NULL, else closes `h` (blocking; refused
/// on a shard thread unless it is closed already). `kind` names the handle in the error text.
int close_handle(shard_handle* h, const char* what, const char* kind);

/// The body of a _destroy function: closes `h` (from a shard thread: hands the close to its
/// shard without waiting).
void close_for_destroy(shard_handle& h) noexcept;

/// Tracks a freshly opened handle on `rt`; when the runtime is stopping, closes it (on a shard
/// thread without waiting) and fails with SHOAL_ECLOSED.
int track_opened(runtime_state& rt, const std::shared_ptr<shard_handle>& h, const char* what);

/// Checks that `shard` exists in `rt` and that the runtime runs (SHOAL_EINVAL/SHOAL_ECLOSED).
int check_shard(const shoal_runtime* rt, unsigned shard, const char* what);

/// check_shard, and that the runtime was started with RDMA (SHOAL_EUNAVAILABLE otherwise).
int check_rdma_shard(const shoal_runtime* rt, unsigned shard, const char* what);

} // namespace shoal::capi
