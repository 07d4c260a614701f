#pragma once

// C++20 coroutine support: a coroutine may return `future<T>` and `co_await` any future.
// Included by core/future.hh; not meant to be included alone.

#include "core/future.hh"

#include <coroutine>

namespace shoal::internal {

/// The promise type of a coroutine returning `future<T>`. The coroutine starts eagerly, and its
/// frame is itself the task the reactor resumes, so awaiting a pending future allocates nothing
/// beyond the frame.
template <typename T>
class coroutine_promise_base : public task {
public:
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void unhandled_exception() noexcept { _promise.set_exception(std::current_exception()); }
    void run_and_dispose() noexcept override { _handle.resume(); }

protected:
    promise<T> _promise;
    std::coroutine_handle<> _handle;
};

template <typename T>
class coroutine_promise final : public coroutine_promise_base<T> {
public:
    future<T> get_return_object() noexcept {
        this->_handle = std::coroutine_handle<coroutine_promise>::from_promise(*this);
        return this->_promise.get_future();
    }
    template <typename U>
    void return_value(U&& v) noexcept {
        this->_promise.set_value(std::forward<U>(v));
    }
};

template <>
class coroutine_promise<void> final : public coroutine_promise_base<void> {
public:
    future<> get_return_object() noexcept {
        _handle = std::coroutine_handle<coroutine_promise>::from_promise(*this);
        return _promise.get_future();
    }
    void return_void() noexcept { this->_promise.set_value(); }
};

/// Awaits a future: a ready one resumes at once, unless the shard's task quota is used up
/// (`need_preempt()`): then the coroutine is queued behind the shard's other tasks and resumes
/// after the reactor polled. A pending one parks the coroutine's task as the promise's waiter.
template <typename T>
class future_awaiter {
public:
    explicit future_awaiter(future<T>&& f) noexcept
        : _f(std::move(f)) {}
    bool await_ready() const noexcept { return _f.available() && !need_preempt(); }
    template <typename P>
    void await_suspend(std::coroutine_handle<P> h) noexcept {
        task* t;
        if constexpr (std::is_base_of_v<task, P>) {
            t = &h.promise();
        } else {
            _resume = resume_task{h};
            t = &_resume;
        }
        if (_f.available()) {
            schedule(t); // preempted: resume after the queued tasks and a poll
        } else {
            _f.set_waiter(*t);
        }
    }
    T await_resume() {
        if constexpr (std::is_void_v<T>) {
            _f.state().take();
        } else {
            return _f.state().take();
        }
    }

private:
    /// Resumes a foreign coroutine (one whose promise is not a shoal task).
    struct resume_task final : task {
        std::coroutine_handle<> h;
        resume_task() = default;
        explicit resume_task(std::coroutine_handle<> hh)
            : h(hh) {}
        void run_and_dispose() noexcept override { h.resume(); }
    };
    future<T> _f;
    resume_task _resume;
};

} // namespace shoal::internal

namespace shoal {

/// `co_await f` on any `future<T>`.
template <typename T>
internal::future_awaiter<T> operator co_await(future<T>&& f) noexcept {
    return internal::future_awaiter<T>(std::move(f));
}

} // namespace shoal

template <typename T, typename... Args>
struct std::coroutine_traits<shoal::future<T>, Args...> {
    using promise_type = shoal::internal::coroutine_promise<T>;
};
