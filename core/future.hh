#pragma once

#include "core/preempt.hh"
#include "core/small_pool.hh"
#include "core/task.hh"

#include <cassert>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace shoal {

template <typename T = void>
class future;
template <typename T = void>
class promise;

/// Thrown into a future whose promise was destroyed without a value.
class broken_promise : public std::logic_error {
public:
    broken_promise()
        : std::logic_error("broken promise") {}
};

/// How many failed futures were dropped without anybody looking at their exception, in this
/// process since it started (every shard). Each one is also logged once, as a warning of the
/// `future` logger naming the exception. Clean runs keep it at zero; tests check that.
uint64_t ignored_failed_futures() noexcept;

namespace internal {

/// Counts and logs one failure nobody consumed (see `ignored_failed_futures`).
void report_ignored_failure(const std::exception_ptr& ex) noexcept;

/// Stands in for the value of a `future<void>`.
struct void_value {};

template <typename T>
using stored_type = std::conditional_t<std::is_void_v<T>, void_value, T>;

/// The result slot shared by futures, promises and continuations: pending, a value or an
/// exception. It is moved between owners, never shared.
template <typename T>
class future_state {
public:
    using value_type = stored_type<T>;

    future_state() noexcept {}
    future_state(future_state&& o) noexcept
        : _status(o._status) {
        if (_status == status::value) {
            new (&_value) value_type(std::move(o._value));
        } else if (_status == status::exception) {
            new (&_ex) std::exception_ptr(std::move(o._ex));
        }
        o.clear();
    }
    future_state& operator=(future_state&& o) noexcept {
        if (this != &o) {
            report_if_failed();
            clear();
            new (this) future_state(std::move(o));
        }
        return *this;
    }
    /// A failure still held here was never looked at: it is reported.
    [[gnu::always_inline]] ~future_state() {
        report_if_failed();
        clear();
    }
    /// Drops the result, value or exception, on purpose (no report).
    void ignore() noexcept { clear(); }

    bool available() const noexcept { return _status == status::value || _status == status::exception; }
    bool failed() const noexcept { return _status == status::exception; }

    template <typename... A>
    void set_value(A&&... a) noexcept(std::is_nothrow_constructible_v<value_type, A...>) {
        assert(_status == status::pending);
        new (&_value) value_type(std::forward<A>(a)...);
        _status = status::value;
    }
    void set_exception(std::exception_ptr ex) noexcept {
        assert(_status == status::pending);
        new (&_ex) std::exception_ptr(std::move(ex));
        _status = status::exception;
    }
    /// Moves the value out; the state must hold a value.
    [[gnu::always_inline]] value_type take_value() noexcept {
        assert(_status == status::value);
        value_type v(std::move(_value));
        clear();
        return v;
    }
    /// Moves the exception out; the state must hold one.
    std::exception_ptr take_exception() noexcept {
        assert(_status == status::exception);
        std::exception_ptr ex(std::move(_ex));
        clear();
        return ex;
    }
    /// Returns the value or rethrows the exception, consuming the state.
    [[gnu::always_inline]] value_type take() {
        if (_status == status::exception) {
            std::rethrow_exception(take_exception());
        }
        return take_value();
    }
    /// Peeks at the exception without consuming it.
    const std::exception_ptr& exception() const noexcept { return _ex; }

private:
    enum class status : uint8_t { pending, value, exception };
    void report_if_failed() noexcept {
        if (_status == status::exception) [[unlikely]] {
            report_dropped();
        }
    }
    /// Out of line and cold, so that the checks above keep futures' moves and destructors small
    /// enough to be inlined on hot paths.
    [[gnu::cold, gnu::noinline]] void report_dropped() noexcept {
        report_ignored_failure(_ex);
        _ex.~exception_ptr();
        _status = status::pending;
    }
    [[gnu::always_inline]] void clear() noexcept {
        if (_status == status::value) {
            _value.~value_type();
        } else if (_status == status::exception) {
            _ex.~exception_ptr();
        }
        _status = status::pending;
    }

    status _status = status::pending;
    union {
        value_type _value;
        std::exception_ptr _ex;
    };
};

template <typename T>
struct is_future : std::false_type {};
template <typename T>
struct is_future<future<T>> : std::true_type {};

/// Maps a callable's result type to the future type `then` returns for it.
template <typename T>
struct futurize {
    using type = future<T>;
};
template <typename T>
struct futurize<future<T>> {
    using type = future<T>;
};

template <typename T, typename U, typename Body>
class continuation;

/// Maps `future<T>` to `T`.
template <typename F>
struct future_arg;
template <typename T>
struct future_arg<future<T>> {
    using type = T;
};
template <typename F>
using future_arg_t = typename future_arg<F>::type;

/// The task of the fiber running on this shard, or null outside fibers (core/thread.cc).
task* current_fiber() noexcept;
/// Switches from the running fiber back to the reactor until the fiber's task is scheduled.
void suspend_fiber() noexcept;

/// Suspends the calling fiber until `f` is available; throws outside a fiber.
template <typename T>
void wait_in_fiber(future<T>& f) {
    task* t = current_fiber();
    if (!t) {
        throw std::logic_error("future::get() on a pending future outside a fiber: use then() or co_await");
    }
    f.set_waiter(*t);
    suspend_fiber();
}

} // namespace internal

template <typename T>
using futurize_t = typename internal::futurize<T>::type;

template <typename T>
inline constexpr bool is_future_v = internal::is_future<T>::value;

/// Invokes `func(args...)` and turns whatever happens into a future: a plain value becomes a
/// ready future, an exception becomes an exceptional one, a returned future is passed through.
template <typename Func, typename... Args>
auto futurize_invoke(Func&& func, Args&&... args) noexcept -> futurize_t<std::invoke_result_t<Func, Args...>>;

template <typename T, typename... A>
future<T> make_ready_future(A&&... value);
template <typename T = void>
future<T> make_exception_future(std::exception_ptr ex) noexcept;
template <typename T = void, typename E>
future<T> make_exception_future(E&& ex) noexcept;

/// The producing side of a future. A promise is set exactly once; the value goes straight into
/// whatever waits for it (a future, a continuation, a suspended coroutine or fiber), and a waiting
/// task is scheduled. Promises are move-only and single-shard.
template <typename T>
class promise {
public:
    using value_type = internal::stored_type<T>;

    promise() noexcept
        : _state(&_local) {}
    promise(promise&& o) noexcept { move_from(std::move(o)); }
    promise& operator=(promise&& o) noexcept {
        if (this != &o) {
            if (tied()) {
                abandon();
            }
            move_from(std::move(o));
        }
        return *this;
    }
    promise(const promise&) = delete;
    promise& operator=(const promise&) = delete;
    ~promise() {
        if (tied()) { // an unused or moved-from promise has nothing to let go of: no call
            abandon();
        }
    }

    /// Returns the future tied to this promise; call it at most once.
    future<T> get_future() noexcept;

    /// Stores the value and wakes whoever waits. Does nothing if the future was dropped.
    template <typename... A>
    void set_value(A&&... a) noexcept {
        if (auto* s = _state) {
            s->set_value(std::forward<A>(a)...);
            resolved();
        }
    }
    /// Stores an exception and wakes whoever waits. If the future was dropped, nobody will see
    /// it: it is reported as an ignored failure.
    void set_exception(std::exception_ptr ex) noexcept {
        if (auto* s = _state) {
            s->set_exception(std::move(ex));
            resolved();
        } else {
            internal::report_ignored_failure(ex);
        }
    }
    template <typename E>
    void set_exception(E&& e) noexcept {
        set_exception(std::make_exception_ptr(std::forward<E>(e)));
    }

private:
    template <typename U>
    friend class future;
    template <typename A, typename B, typename C>
    friend class internal::continuation;

    void set_state(internal::future_state<T>&& st) noexcept {
        if (auto* s = _state) {
            *s = std::move(st);
            resolved();
        }
    }
    void resolved() noexcept;
    void move_from(promise&& o) noexcept;
    void abandon() noexcept;
    /// Whether anything waits on this promise or holds its state (a future, a waiter, a
    /// continuation's state): else abandoning it does nothing.
    bool tied() const noexcept { return _future || _waiter || (_state && _state != &_local); }

    internal::future_state<T> _local; // holds an early value until get_future() is called
    internal::future_state<T>* _state = nullptr;
    future<T>* _future = nullptr;
    task* _waiter = nullptr;
};

/// The consuming side of an asynchronous result of type `T` (`void` allowed). A ready future
/// holds its value inline; `then` on it runs the function at once without allocating. A pending
/// future is tied to a promise; chaining on it allocates one continuation at most. A failed
/// future destroyed without its exception being consumed (`get`, `then_wrapped`, `co_await`,
/// `get_exception`, `ignore_ready_future`, ...) is reported once (`ignored_failed_futures`).
template <typename T>
class [[nodiscard]] future {
public:
    using value_type = internal::stored_type<T>;

    [[gnu::always_inline]] future(future&& o) noexcept
        : _state(std::move(o._state))
        , _promise(o._promise) {
        if (_promise) {
            o._promise = nullptr;
            _promise->_future = this;
            _promise->_state = &_state;
        }
    }
    future& operator=(future&& o) noexcept {
        if (this != &o) {
            this->~future();
            new (this) future(std::move(o));
        }
        return *this;
    }
    future(const future&) = delete;
    future& operator=(const future&) = delete;
    [[gnu::always_inline]] ~future() { detach_promise(); }

    /// True when the result (a value or an exception) is here.
    bool available() const noexcept { return _state.available(); }
    /// True when the result is here and is an exception.
    bool failed() const noexcept { return _state.failed(); }

    /// Returns the value or rethrows the exception. On a pending future this suspends the
    /// calling fiber (see core/thread.hh); outside a fiber a pending future is a logic error.
    value_type get();

    /// Runs `func(value)` once the value is here and returns a future of its result (a future
    /// returned by `func` is unwrapped). An exception skips `func` and propagates.
    template <typename Func>
    auto then(Func&& func) noexcept;

    /// Runs `func(future<T>)` with the ready future, value or exception.
    template <typename Func>
    auto then_wrapped(Func&& func) noexcept;

    /// On an exception, runs `func(std::exception_ptr)`, which must produce a T (or future<T>).
    template <typename Func>
    future<T> handle_exception(Func&& func) noexcept;

    /// Runs `func()` whatever the outcome, then yields the original outcome (an exception thrown
    /// or returned by `func` replaces it).
    template <typename Func>
    future<T> finally(Func&& func) noexcept;

    /// Drops the value, keeping only success or failure.
    future<> discard_result() noexcept;

    /// Sends this future's outcome into `pr`. On a pending future this costs no allocation: the
    /// promise that feeds this future is retargeted to `pr`'s destination.
    void forward_to(promise<T>&& pr) noexcept;

    /// Consumes a failed future's exception.
    std::exception_ptr get_exception() noexcept { return _state.take_exception(); }

    /// Marks a ready future as consumed (value or exception ignored on purpose, not reported).
    void ignore_ready_future() noexcept { _state.ignore(); }

    /// Low level: makes `t` run when the result arrives. The future must stay where it is until
    /// then (a coroutine awaiter or a fiber keeps it on its frame).
    void set_waiter(task& t) noexcept {
        assert(_promise && !_state.available());
        _promise->_waiter = &t;
    }

    /// Low level: the result slot; used by awaiters and fibers once the future is available.
    internal::future_state<T>& state() noexcept { return _state; }

    /// Wraps an already-resolved state.
    explicit future(internal::future_state<T>&& st) noexcept
        : _state(std::move(st)) {}

private:
    template <typename U>
    friend class promise;
    template <typename U>
    friend class future;
    template <typename U, typename... A>
    friend future<U> make_ready_future(A&&...);
    template <typename A, typename B, typename C>
    friend class internal::continuation;
    template <typename U>
    friend future<U> make_exception_future(std::exception_ptr) noexcept;

    future() noexcept = default;
    explicit future(promise<T>* pr) noexcept
        : _promise(pr) {
        _state = std::move(pr->_local);
        if (_state.available()) {
            // The promise was set before get_future(): nothing to link.
            pr->_state = nullptr;
            _promise = nullptr;
        } else {
            pr->_state = &_state;
            pr->_future = this;
        }
    }

    void detach_promise() noexcept {
        if (_promise) {
            _promise->_future = nullptr;
            _promise->_state = nullptr;
            _promise->_waiter = nullptr;
            _promise = nullptr;
        }
    }

    /// Allocates the one continuation a pending future needs and hands the link to it.
    template <typename U, typename Body>
    future<U> chain(Body&& body) noexcept;

    internal::future_state<T> _state;
    promise<T>* _promise = nullptr;
};

namespace internal {

/// A continuation waiting for a `T` and producing a `U`: the one heap object a pending `then`
/// costs (taken from the shard's `small_pool` when it is small, as it usually is). It holds the
/// incoming state, the promise of the result and the body to run; it is the task the feeding
/// promise schedules.
template <typename T, typename U, typename Body>
class continuation final : public task {
public:
    SHOAL_SMALL_POOL_ALLOCATED
    explicit continuation(Body&& body)
        : _body(std::move(body)) {}
    void run_and_dispose() noexcept override {
        _body(std::move(_state), std::move(_pr));
        delete this;
    }

    future_state<T> _state;
    promise<U> _pr;

private:
    Body _body;
};

template <typename T, typename Func>
struct then_result {
    using type = std::conditional_t<std::is_void_v<T>, std::invoke_result<Func>, std::invoke_result<Func, T>>;
};
template <typename T, typename Func>
using then_result_t = typename then_result<T, Func>::type::type;

} // namespace internal

// ---------------------------------------------------------------------------------------------
// promise

template <typename T>
future<T> promise<T>::get_future() noexcept {
    assert(!_future && _state == &_local);
    return future<T>(this);
}

template <typename T>
void promise<T>::resolved() noexcept {
    if (_state == &_local) {
        return; // set before get_future(): the future will pick the value up
    }
    if (_future) {
        _future->_promise = nullptr;
        _future = nullptr;
    }
    _state = nullptr;
    if (task* w = std::exchange(_waiter, nullptr)) {
        ::shoal::schedule(w);
    }
}

template <typename T>
void promise<T>::move_from(promise&& o) noexcept {
    if (o._state == &o._local) {
        _local = std::move(o._local);
        _state = &_local;
    } else {
        _state = o._state;
    }
    _future = o._future;
    _waiter = o._waiter;
    if (_future) {
        _future->_promise = this;
    }
    o._state = nullptr;
    o._future = nullptr;
    o._waiter = nullptr;
}

template <typename T>
void promise<T>::abandon() noexcept {
    if (_state && _state != &_local && !_state->available()) {
        set_exception(std::make_exception_ptr(broken_promise()));
    }
    if (_future) {
        _future->_promise = nullptr;
    }
    _state = nullptr;
    _future = nullptr;
    _waiter = nullptr;
}

// ---------------------------------------------------------------------------------------------
// free functions

/// A future that already holds `value`.
template <typename T = void, typename... A>
future<T> make_ready_future(A&&... value) {
    future<T> f;
    f._state.set_value(std::forward<A>(value)...);
    return f;
}

/// A future that already holds the exception `ex`.
template <typename T>
future<T> make_exception_future(std::exception_ptr ex) noexcept {
    future<T> f;
    f._state.set_exception(std::move(ex));
    return f;
}

template <typename T, typename E>
future<T> make_exception_future(E&& ex) noexcept {
    return make_exception_future<T>(std::make_exception_ptr(std::forward<E>(ex)));
}

template <typename Func, typename... Args>
auto futurize_invoke(Func&& func, Args&&... args) noexcept
    -> futurize_t<std::invoke_result_t<Func, Args...>> {
    using R = std::invoke_result_t<Func, Args...>;
    try {
        if constexpr (is_future_v<R>) {
            return std::forward<Func>(func)(std::forward<Args>(args)...);
        } else if constexpr (std::is_void_v<R>) {
            std::forward<Func>(func)(std::forward<Args>(args)...);
            return make_ready_future<>();
        } else {
            return make_ready_future<R>(std::forward<Func>(func)(std::forward<Args>(args)...));
        }
    } catch (...) {
        return make_exception_future<internal::future_arg_t<futurize_t<R>>>(std::current_exception());
    }
}

// ---------------------------------------------------------------------------------------------
// future

template <typename T>
void future<T>::forward_to(promise<T>&& pr) noexcept {
    if (_state.available()) {
        pr.set_state(std::move(_state));
        return;
    }
    promise<T>* feeder = _promise;
    detach_promise();
    *feeder = std::move(pr);
}

template <typename T>
template <typename U, typename Body>
future<U> future<T>::chain(Body&& body) noexcept {
    using cont = internal::continuation<T, U, std::decay_t<Body>>;
    auto* c = new (std::nothrow) cont(std::forward<Body>(body));
    if (!c) {
        return make_exception_future<U>(std::make_exception_ptr(std::bad_alloc()));
    }
    future<U> f = c->_pr.get_future();
    _promise->_state = &c->_state;
    _promise->_future = nullptr;
    _promise->_waiter = c;
    _promise = nullptr;
    return f;
}

template <typename T>
template <typename Func>
auto future<T>::then(Func&& func) noexcept {
    using R = internal::then_result_t<T, std::decay_t<Func>>;
    using U = internal::future_arg_t<futurize_t<R>>;
    if (_state.available()) {
        if (_state.failed()) {
            return make_exception_future<U>(_state.take_exception());
        }
        if constexpr (std::is_void_v<T>) {
            _state.take_value();
            return futurize_invoke(std::forward<Func>(func));
        } else {
            return futurize_invoke(std::forward<Func>(func), _state.take_value());
        }
    }
    return chain<U>(
        [func = std::forward<Func>(func)](internal::future_state<T>&& st, promise<U>&& pr) mutable noexcept {
            if (st.failed()) {
                pr.set_exception(st.take_exception());
            } else if constexpr (std::is_void_v<T>) {
                st.take_value();
                futurize_invoke(func).forward_to(std::move(pr));
            } else {
                futurize_invoke(func, st.take_value()).forward_to(std::move(pr));
            }
        });
}

template <typename T>
template <typename Func>
auto future<T>::then_wrapped(Func&& func) noexcept {
    using R = std::invoke_result_t<std::decay_t<Func>, future<T>>;
    using U = internal::future_arg_t<futurize_t<R>>;
    if (_state.available()) {
        return futurize_invoke(std::forward<Func>(func), future<T>(std::move(_state)));
    }
    return chain<U>(
        [func = std::forward<Func>(func)](internal::future_state<T>&& st, promise<U>&& pr) mutable noexcept {
            futurize_invoke(func, future<T>(std::move(st))).forward_to(std::move(pr));
        });
}

template <typename T>
template <typename Func>
future<T> future<T>::handle_exception(Func&& func) noexcept {
    return then_wrapped([func = std::forward<Func>(func)](future<T> f) mutable -> future<T> {
        if (!f.failed()) {
            return f;
        }
        return futurize_invoke(func, f.get_exception());
    });
}

template <typename T>
template <typename Func>
future<T> future<T>::finally(Func&& func) noexcept {
    return then_wrapped([func = std::forward<Func>(func)](future<T> f) mutable -> future<T> {
        return futurize_invoke(func).then_wrapped([f = std::move(f)](future<> done) mutable -> future<T> {
            if (done.failed()) {
                f.ignore_ready_future();
                return make_exception_future<T>(done.get_exception());
            }
            return std::move(f);
        });
    });
}

template <typename T>
future<> future<T>::discard_result() noexcept {
    if constexpr (std::is_void_v<T>) {
        return std::move(*this);
    } else {
        return then([](T&&) {});
    }
}

template <typename T>
typename future<T>::value_type future<T>::get() {
    if (!_state.available()) {
        internal::wait_in_fiber(*this);
    }
    return _state.take();
}

} // namespace shoal

#include "core/coroutine.hh"
