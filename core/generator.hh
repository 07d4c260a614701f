#pragma once

#include "core/future.hh"

#include <coroutine>
#include <exception>
#include <optional>
#include <stdexcept>
#include <utility>

namespace shoal {

/// An asynchronous generator: a coroutine returning `generator<T>` produces values with
/// `co_yield` and may `co_await` futures in between; the consumer calls it, `co_await gen()`,
/// and gets the next value or `nullopt` once the body has returned (an exception thrown by the
/// body fails that call). The body starts at the first call and runs until its next `co_yield`,
/// so values are produced one at a time, on demand. Call again only once the previous call
/// resolved. Costs the coroutine frame; a call whose value is produced without suspending
/// allocates nothing. Destroying the generator between calls destroys the body's frame (and its
/// locals) where it stopped; destroying it while a call is pending lets the body run to its next
/// `co_yield` or its end and frees the frame then. Movable, not copyable; one shard.
template <typename T>
class generator {
public:
    /// The coroutine's promise (used by the compiler). It is the task the reactor resumes when
    /// a future the body awaits resolves.
    class promise_type final : public task {
    public:
        generator get_return_object() noexcept {
            _handle = std::coroutine_handle<promise_type>::from_promise(*this);
            return generator(_handle);
        }
        std::suspend_always initial_suspend() noexcept { return {}; }
        auto final_suspend() noexcept { return pause{}; }
        template <typename U>
        auto yield_value(U&& value) noexcept {
            _running = false;
            _consumer.set_value(std::optional<T>(std::forward<U>(value)));
            return pause{};
        }
        void return_void() noexcept {
            _running = false;
            _done = true;
            _consumer.set_value(std::nullopt);
        }
        void unhandled_exception() noexcept {
            _running = false;
            _done = true;
            _consumer.set_exception(std::current_exception());
        }
        void run_and_dispose() noexcept override { _handle.resume(); }

    private:
        friend class generator;
        /// Suspends the body after a value or at its end; frees the frame instead if the
        /// generator was destroyed meanwhile.
        struct pause {
            bool await_ready() const noexcept { return false; }
            void await_suspend(std::coroutine_handle<promise_type> h) noexcept {
                if (h.promise()._detached) {
                    h.destroy();
                }
            }
            void await_resume() const noexcept {}
        };

        std::coroutine_handle<promise_type> _handle;
        promise<std::optional<T>> _consumer;
        bool _running = false;
        bool _done = false;
        bool _detached = false;
    };

    generator(generator&& o) noexcept
        : _h(std::exchange(o._h, nullptr)) {}
    generator& operator=(generator&& o) noexcept {
        if (this != &o) {
            release();
            _h = std::exchange(o._h, nullptr);
        }
        return *this;
    }
    generator(const generator&) = delete;
    generator& operator=(const generator&) = delete;
    ~generator() { release(); }

    /// Runs the body to its next value: resolves with it, or with `nullopt` once the body has
    /// returned (and on every later call); fails with what the body threw. Fails with
    /// `std::logic_error` while the previous call is pending.
    future<std::optional<T>> operator()() {
        auto& p = _h.promise();
        if (p._done) {
            return make_ready_future<std::optional<T>>(std::nullopt);
        }
        if (p._running) {
            return make_exception_future<std::optional<T>>(
                std::logic_error("generator called again before its previous value was produced"));
        }
        p._consumer = promise<std::optional<T>>();
        auto f = p._consumer.get_future();
        p._running = true;
        _h.resume();
        return f;
    }

private:
    explicit generator(std::coroutine_handle<promise_type> h) noexcept
        : _h(h) {}
    void release() noexcept {
        if (auto h = std::exchange(_h, nullptr)) {
            if (h.promise()._running) {
                h.promise()._detached =
                    true; // the body frees its frame when it next suspends (a co_yield or its end)
            } else {
                h.destroy();
            }
        }
    }

    std::coroutine_handle<promise_type> _h;
};

} // namespace shoal
