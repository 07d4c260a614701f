#pragma once

#include "core/future_util.hh"
#include "core/smp.hh"

#include <cassert>
#include <functional>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <vector>

namespace shoal {

namespace internal {
template <typename S>
concept has_stop = requires(S& s) {
    { s.stop() } -> std::same_as<future<>>;
};
} // namespace internal

/// One instance of service `S` per shard, each created, used and destroyed on its own shard.
/// Drive it from one shard (usually 0): `start(args...)` constructs `S(args...)` everywhere,
/// `stop()` calls `S::stop()` (when it has one) everywhere and then destroys the instances.
template <typename S>
class sharded {
public:
    sharded() = default;
    sharded(const sharded&) = delete;
    sharded& operator=(const sharded&) = delete;
    ~sharded() { assert(_instances.empty() && "sharded<S> destroyed without stop()"); }

    /// Constructs `S(args...)` on every shard; the arguments are copied to each shard. If any
    /// construction fails, the instances already built are destroyed and the error returned.
    template <typename... Args>
    future<> start(Args... args) {
        if (!_instances.empty()) {
            return make_exception_future<>(std::logic_error("sharded<S>::start called twice"));
        }
        _instances.resize(shard_count());
        std::vector<future<>> started;
        for (unsigned s = 0; s < shard_count(); ++s) {
            started.push_back(submit_to(s, [this, s, args...]() mutable {
                _instances[s] = std::make_unique<S>(std::move(args)...);
            }));
        }
        return when_all_succeed(std::move(started)).handle_exception([this](std::exception_ptr ex) {
            return destroy_all().then([ex] { return make_exception_future<>(ex); });
        });
    }

    /// Stops (if `S` has `future<> stop()`) and destroys every instance.
    future<> stop() {
        if (_instances.empty()) {
            return make_ready_future<>();
        }
        std::vector<future<>> stopped;
        for (unsigned s = 0; s < _instances.size(); ++s) {
            stopped.push_back(submit_to(s, [this, s]() -> future<> {
                if constexpr (internal::has_stop<S>) {
                    if (_instances[s]) {
                        return _instances[s]->stop();
                    }
                }
                return make_ready_future<>();
            }));
        }
        return when_all_succeed(std::move(stopped)).finally([this] { return destroy_all(); });
    }

    /// The calling shard's instance.
    S& local() {
        assert(this_shard_id() < _instances.size() && _instances[this_shard_id()]);
        return *_instances[this_shard_id()];
    }
    /// True between a successful `start()` and `stop()`.
    bool started() const noexcept { return !_instances.empty(); }

    /// Runs `func(S&)` on `shard`'s instance and returns its result there.
    template <typename Func>
    auto invoke_on(unsigned shard, Func func) {
        return submit_to(shard, [this, func = std::move(func)]() mutable { return func(local()); });
    }

    /// Runs `func(S&)` on every shard's instance; resolves when all have finished.
    template <typename Func>
    future<> invoke_on_all(Func func) {
        std::vector<future<>> done;
        for (unsigned s = 0; s < _instances.size(); ++s) {
            done.push_back(submit_to(s, [this, func]() mutable -> future<> {
                return futurize_invoke(func, local()).discard_result();
            }));
        }
        return when_all_succeed(std::move(done));
    }

    /// Runs `mapper(S&)` on every shard and folds the results on the calling shard with
    /// `reducer(accumulated, result)`, starting from `initial`.
    template <typename Mapper, typename T, typename Reducer>
    future<T> map_reduce(Mapper mapper, T initial, Reducer reducer) {
        using R = internal::future_arg_t<futurize_t<std::invoke_result_t<Mapper, S&>>>;
        std::vector<future<R>> results;
        for (unsigned s = 0; s < _instances.size(); ++s) {
            results.push_back(
                submit_to(s, [this, mapper]() mutable { return futurize_invoke(mapper, local()); }));
        }
        auto values = co_await when_all_succeed(std::move(results));
        for (auto& v : values) {
            initial = reducer(std::move(initial), std::move(v));
        }
        co_return initial;
    }

private:
    future<> destroy_all() {
        std::vector<future<>> destroyed;
        for (unsigned s = 0; s < _instances.size(); ++s) {
            destroyed.push_back(submit_to(s, [this, s] { _instances[s].reset(); }));
        }
        return when_all_succeed(std::move(destroyed)).finally([this] { _instances.clear(); });
    }

    std::vector<std::unique_ptr<S>> _instances;
};

} // namespace shoal
