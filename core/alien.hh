#pragma once

// Shards driven from outside: a program that is not a shoal program (a C or C# host, through
// the C ABI) starts the engine on threads of its own and hands work to its shards from any
// thread. Threads outside the engine are "aliens": they never touch a shard's state, they queue
// work for it and wait for a std::future.

#include "core/future.hh"
#include "core/smp.hh"

#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

namespace shoal::alien {

/// Thrown (or stored in the std::future) when work is handed to an engine that has stopped or
/// is stopping: the work did not run.
class engine_stopped : public std::runtime_error {
public:
    engine_stopped()
        : std::runtime_error("the shoal engine is stopped") {}
};

namespace internal {

/// One piece of work queued by an alien thread for a shard.
class work {
public:
    virtual ~work() = default;
    /// Runs it on the target shard; resolves when it is done (stopping waits for that).
    virtual future<> run() noexcept = 0;
    /// It will never run (the engine stopped first).
    virtual void cancel() noexcept = 0;
};

class inbox;

} // namespace internal

/// True on a shard thread of an `engine` (where blocking on a std::future from `submit` would
/// deadlock); false on the host's own threads.
bool on_engine_thread() noexcept;

/// A shoal engine running on background threads (shard 0 included), for a host program that
/// keeps its own threads. One per process at a time (like `run_shards`). Work reaches a shard
/// through `submit` or `post` from any thread; on the shard it runs like any task. Handing work
/// over costs a lock and, when the shard's queue was empty, one eventfd write: it is for host
/// calls, not for traffic between shards (use `submit_to` there).
class engine {
public:
    /// Starts `opts.smp` shards (signal handling is always off: the host owns its signals) and
    /// returns once every shard accepts work. Shard threads are named `shoal-shard-N`. Throws what
    /// `run_shards` throws when the shards cannot start, or std::logic_error when an engine already runs in
    /// this process.
    explicit engine(smp_options opts);
    /// Stops the engine (see `stop`).
    ~engine();
    engine(const engine&) = delete;
    engine& operator=(const engine&) = delete;

    /// Stops accepting work, runs what was queued, stops the shards after their queued work has
    /// drained and joins their threads. Idempotent and safe from any thread but a shard's; the
    /// first call waits for the end, later ones return at once.
    void stop();
    /// Number of shards.
    unsigned shards() const noexcept { return _shards; }
    /// False once `stop` has begun.
    bool running() const noexcept;

    /// Queues `fn()` (which returns nothing and must not throw) to run on `shard` and returns at once; false
    /// (and `fn` destroyed unrun) when the engine is stopping or `shard` does not exist.
    template <typename Func>
    bool post(unsigned shard, Func fn) {
        struct posted final : internal::work {
            explicit posted(Func f)
                : _f(std::move(f)) {}
            future<> run() noexcept override {
                _f();
                return make_ready_future<>();
            }
            void cancel() noexcept override {}
            Func _f;
        };
        return queue(shard, std::make_unique<posted>(std::move(fn)));
    }

    /// Runs `fn()` on `shard` (`fn` lives until what it returned is ready, so a coroutine lambda
    /// may capture); the std::future holds its result once the value or future it
    /// returned is ready (its exception if it threw or failed; `engine_stopped` when the engine
    /// stopped before running it; std::out_of_range for a shard that does not exist).
    template <typename Func>
    auto submit(unsigned shard, Func fn) {
        using result = shoal::internal::future_arg_t<futurize_t<std::invoke_result_t<Func>>>;
        struct submitted final : internal::work {
            explicit submitted(Func f)
                : _f(std::move(f)) {}
            future<> run() noexcept override {
                return futurize_invoke(std::move(_f)).then_wrapped([pr = std::move(_pr)](auto f) mutable {
                    if (f.failed()) {
                        pr.set_exception(f.get_exception());
                    } else if constexpr (std::is_void_v<result>) {
                        f.get();
                        pr.set_value();
                    } else {
                        pr.set_value(f.get());
                    }
                });
            }
            void cancel() noexcept override { _pr.set_exception(std::make_exception_ptr(engine_stopped())); }
            Func _f;
            std::promise<result> _pr;
        };
        auto w = std::make_unique<submitted>(std::move(fn));
        auto fut = w->_pr.get_future();
        if (shard >= _shards) {
            w->_pr.set_exception(std::make_exception_ptr(std::out_of_range(
                "no shard " + std::to_string(shard) + " in an engine of " + std::to_string(_shards))));
        } else {
            (void)queue(shard, std::move(w));
        }
        return fut;
    }

private:
    bool queue(unsigned shard, std::unique_ptr<internal::work> w);
    unsigned _shards = 0;
    std::vector<std::unique_ptr<internal::inbox>> _inboxes;
    std::thread _thread;
    std::function<void()> _stop_signal; // set and called on shard 0
    std::atomic<bool> _stopped{false};
};

} // namespace shoal::alien
