#pragma once

#include "core/future.hh"
#include "core/reactor.hh"
#include "core/small_pool.hh"

#include <functional>
#include <optional>
#include <type_traits>
#include <vector>

namespace shoal {

/// The shard the calling thread runs (0 outside shards).
unsigned this_shard_id() noexcept;
/// Number of shards of the running engine (1 outside shards).
unsigned shard_count() noexcept;

/// How to start the shards of an engine.
struct smp_options {
    /// Number of shards; 0 means one per CPU in `cpuset` (or per CPU the process may use).
    unsigned smp = 1;
    /// CPUs to pin shard i to (`cpuset[i]`); empty: the first `smp` CPUs the process may use.
    std::vector<unsigned> cpuset;
    /// Pin each shard's thread to its CPU.
    bool pin = true;
    /// Turn SIGINT and SIGTERM into a stop request (see `stop_requested()`).
    bool handle_signals = false;
    reactor_config reactor;
};

/// Starts `opts.smp` shards (the calling thread becomes shard 0), runs `main` on shard 0 and,
/// when its future resolves, stops every shard after its queued work has drained. Returns main's
/// value, or 128+signal when a signal stopped a `main` that did not wait for it. Throws
/// std::system_error / std::invalid_argument when the shards cannot be started.
int run_shards(const smp_options& opts, std::function<future<int>()> main);

/// The CPUs this process may run on (its affinity mask; every CPU when it cannot be read).
std::vector<unsigned> allowed_cpus();

/// Resolves when the engine was asked to stop (SIGINT/SIGTERM with `handle_signals`, or
/// `request_stop()`). Call on shard 0. When nobody waits for it, a signal stops the engine
/// directly.
future<> stop_requested();
/// Asks the engine to stop, as a signal would. Call on shard 0.
void request_stop();

/// Most cross-shard calls in flight from one shard to another (from `submit_to` until its answer
/// is back on the caller). Further calls wait, in order, until an answer frees a place; this keeps
/// every queue between two shards within its ring, so neither side ever holds a backlog it
/// cannot publish. Calls that wait on each other in a cycle (A's calls into B each wait for a call
/// from B into A, which waits for a call from A into B, ...) can exhaust it; keep nesting shallow.
inline constexpr unsigned smp_max_in_flight = 256;

/// The calling shard's side of its cross-shard queues with one peer shard. Read on the calling
/// shard: every field is one that only this shard writes.
struct smp_queue_stats {
    uint64_t calls_sent = 0;     ///< calls this shard submitted to the peer (`submit_to` and the like)
    uint64_t calls_received = 0; ///< calls from the peer this shard ran
    unsigned in_flight = 0;      ///< calls to the peer between submission and completion
    unsigned waiting = 0;        ///< calls to the peer waiting for a place (beyond `smp_max_in_flight`)
    size_t backlog = 0;          ///< requests and replies for the peer not yet published to its rings
};

/// The counters of the calling shard's queues with `peer` (all zero for itself or outside an engine).
smp_queue_stats smp_stats(unsigned peer) noexcept;

namespace internal {

/// A unit of cross-shard work: runs on the target shard, then returns to the source shard
/// to complete. Allocated by the source, freed by the source: recycled through the source
/// shard's `small_pool`, so a steady stream of calls does not go through malloc.
class smp_message {
public:
    SHOAL_SMALL_POOL_ALLOCATED
    virtual ~smp_message() = default;
    /// Runs on the target shard; must end (now or later) with `respond()`.
    virtual void run_on_target() noexcept = 0;
    /// Runs on the source shard once the target responded.
    virtual void complete_on_source() noexcept = 0;
    /// Sends the message back to its source (call on the target shard).
    void respond() noexcept;

    unsigned _source = 0;
    unsigned _target = 0;
    smp_message* _next_waiting = nullptr; ///< link in its pair's queue of calls waiting for a place
};

/// Queues `m` for `target` (batched: published once per reactor poll); when `smp_max_in_flight`
/// calls to `target` are already in flight, `m` waits for one of them to complete.
void smp_submit(unsigned target, smp_message* m) noexcept;

template <typename Func>
class submit_message final : public smp_message {
public:
    using result_future = futurize_t<std::invoke_result_t<Func>>;
    using result_type = future_arg_t<result_future>;

    explicit submit_message(Func&& f)
        : _func(std::move(f)) {}

    void run_on_target() noexcept override {
        auto f = futurize_invoke(_func);
        if (f.available()) {
            _result = std::move(f.state());
            respond();
            return;
        }
        // Pending: finish when it resolves (the then_wrapped continuation is the only allocation).
        (void)std::move(f).then_wrapped([this](result_future r) noexcept {
            _result = std::move(r.state());
            respond();
        });
    }
    void complete_on_source() noexcept override {
        if (_result.failed()) {
            _pr.set_exception(_result.take_exception());
        } else if constexpr (std::is_void_v<result_type>) {
            _result.take_value();
            _pr.set_value();
        } else {
            _pr.set_value(_result.take_value());
        }
        delete this;
    }
    promise<result_type> _pr;

private:
    Func _func;
    future_state<result_type> _result;
};

} // namespace internal

/// Runs `func()` on `shard` and returns its result (a future it returns is unwrapped) on the
/// calling shard. `func` is moved to the target shard; capture only what may cross shards.
/// On the calling shard itself `func` runs at once.
template <typename Func>
auto submit_to(unsigned shard, Func&& func) -> futurize_t<std::invoke_result_t<std::decay_t<Func>>> {
    using F = std::decay_t<Func>;
    if (shard == this_shard_id()) {
        return futurize_invoke(std::forward<Func>(func));
    }
    if (shard >= shard_count()) {
        using T = internal::future_arg_t<futurize_t<std::invoke_result_t<F>>>;
        return make_exception_future<T>(std::out_of_range("submit_to: no shard " + std::to_string(shard)));
    }
    auto* m = new internal::submit_message<F>(F(std::forward<Func>(func)));
    auto f = m->_pr.get_future();
    internal::smp_submit(shard, m);
    return f;
}

/// Runs `func()` on every shard and resolves when all are done (the first failure wins).
future<> invoke_on_all_shards(std::function<future<>()> func);

} // namespace shoal
