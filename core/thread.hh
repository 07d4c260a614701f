#pragma once

#include "core/future.hh"

#include <cstddef>
#include <functional>
#include <memory>
#include <type_traits>

namespace shoal {

/// Options of a stackful thread.
struct thread_attributes {
    /// Usable stack size in bytes (a guard page is added below it).
    size_t stack_size = 128 * 1024;
};

namespace internal {
class thread_context;
}

/// A stackful thread (fiber) on the current shard, built on Boost.Context. Inside it,
/// `future::get()` suspends the fiber, not the reactor, so straight-line code can wait for
/// I/O. Fibers of one shard take turns with the shard's other tasks; they never run in parallel.
class thread {
public:
    /// Starts `func` in a new fiber; it first runs when the reactor reaches it.
    explicit thread(std::function<void()> func, thread_attributes attr = {});
    thread(thread&&) noexcept;
    thread& operator=(thread&&) noexcept;
    ~thread();

    /// Resolves when the fiber's function has returned (with its exception, if it threw).
    future<> join();

    /// True when the caller runs inside a fiber.
    static bool running_in_thread() noexcept;
    /// Lets the reactor run other tasks, then resumes the calling fiber. Call inside a fiber.
    static void yield();

private:
    std::unique_ptr<internal::thread_context> _context;
};

/// Runs `func()` in a new fiber and returns its result as a future.
template <typename Func>
auto async(thread_attributes attr, Func func) -> futurize_t<std::invoke_result_t<Func>> {
    using R = std::invoke_result_t<Func>;
    using T = internal::future_arg_t<futurize_t<R>>;
    auto result = std::make_unique<internal::future_state<T>>();
    auto* slot = result.get();
    thread t(
        [slot, func = std::move(func)]() mutable {
            try {
                if constexpr (is_future_v<R>) {
                    auto f = func();
                    if constexpr (std::is_void_v<T>) {
                        f.get();
                        slot->set_value();
                    } else {
                        slot->set_value(f.get());
                    }
                } else if constexpr (std::is_void_v<R>) {
                    func();
                    slot->set_value();
                } else {
                    slot->set_value(func());
                }
            } catch (...) {
                slot->set_exception(std::current_exception());
            }
        },
        attr);
    auto joined = t.join();
    return std::move(joined).then_wrapped(
        [t = std::move(t), result = std::move(result)](future<> j) mutable -> future<T> {
            j.ignore_ready_future();
            return future<T>(std::move(*result));
        });
}

/// `async` with default attributes.
template <typename Func>
auto async(Func func) {
    return async(thread_attributes{}, std::move(func));
}

} // namespace shoal
