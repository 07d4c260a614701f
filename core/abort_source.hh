#pragma once

#include <exception>
#include <functional>
#include <utility>

namespace shoal {

/// The default reason an operation was cancelled through an `abort_source`.
class abort_requested_exception : public std::exception {
public:
    const char* what() const noexcept override { return "abort requested"; }
};

/// A cancellation signal for one shard. Operations that can be cancelled take an
/// `abort_source&` and `subscribe` a callback; `request_abort()` calls every subscribed callback
/// once, in subscription order, with the reason (an exception the operation fails with).
/// Neither copyable nor movable (subscriptions point at it); not thread-safe (cancel another
/// shard's operation with `submit_to`).
class abort_source {
public:
    /// What a subscriber runs on abort; it receives the reason.
    using callback = std::function<void(const std::exception_ptr&)>;

    /// One subscribed callback; unsubscribes when destroyed, so an operation that finishes first
    /// simply drops it. Movable. Empty (false) when the source had already been aborted.
    class subscription {
    public:
        subscription() noexcept = default;
        subscription(subscription&& o) noexcept { take(std::move(o)); }
        subscription& operator=(subscription&& o) noexcept {
            if (this != &o) {
                unlink();
                take(std::move(o));
            }
            return *this;
        }
        subscription(const subscription&) = delete;
        subscription& operator=(const subscription&) = delete;
        ~subscription() { unlink(); }
        /// True while subscribed (not yet called, not the product of an aborted source).
        explicit operator bool() const noexcept { return _source != nullptr; }

    private:
        friend class abort_source;
        subscription(abort_source& s, callback cb) noexcept
            : _source(&s)
            , _cb(std::move(cb)) {
            _prev = s._tail;
            (_prev ? _prev->_next : s._head) = this;
            s._tail = this;
        }
        void unlink() noexcept {
            if (!_source) {
                return;
            }
            (_prev ? _prev->_next : _source->_head) = _next;
            (_next ? _next->_prev : _source->_tail) = _prev;
            _source = nullptr;
            _prev = _next = nullptr;
        }
        void take(subscription&& o) noexcept {
            _source = o._source;
            _cb = std::move(o._cb);
            _prev = o._prev;
            _next = o._next;
            if (_source) {
                (_prev ? _prev->_next : _source->_head) = this;
                (_next ? _next->_prev : _source->_tail) = this;
            }
            o._source = nullptr;
            o._prev = o._next = nullptr;
        }

        abort_source* _source = nullptr;
        callback _cb;
        subscription* _prev = nullptr;
        subscription* _next = nullptr;
    };

    abort_source() = default;
    abort_source(const abort_source&) = delete;
    abort_source& operator=(const abort_source&) = delete;
    /// Subscriptions that outlive the source are detached (never called).
    ~abort_source() {
        while (_head) {
            _head->unlink();
        }
    }

    /// Registers `cb` to run on abort. Returns an empty subscription, without calling `cb`, if
    /// the abort was already requested: check `abort_requested()` first or test the result.
    [[nodiscard]] subscription subscribe(callback cb) {
        if (_ex) {
            return subscription();
        }
        return subscription(*this, std::move(cb));
    }

    /// Requests the abort with `abort_requested_exception`. Only the first request counts.
    void request_abort() noexcept { request_abort_ex(std::make_exception_ptr(abort_requested_exception())); }
    /// Requests the abort with `ex` as the reason operations fail with.
    void request_abort_ex(std::exception_ptr ex) noexcept {
        if (_ex) {
            return;
        }
        _ex = std::move(ex);
        // Each callback is unsubscribed before it runs; it may destroy its subscription or
        // subscribe others (those are not called: the source is already aborted).
        while (subscription* s = _head) {
            callback cb = std::move(s->_cb);
            s->unlink();
            cb(_ex); // must not throw (this function is noexcept)
        }
    }
    /// Requests the abort with the exception `e`.
    template <typename E>
    void request_abort_ex(E&& e) noexcept {
        request_abort_ex(std::make_exception_ptr(std::forward<E>(e)));
    }

    /// True once an abort was requested.
    bool abort_requested() const noexcept { return bool(_ex); }
    /// The reason of the abort (null before).
    const std::exception_ptr& abort_exception() const noexcept { return _ex; }
    /// Throws the reason if an abort was requested.
    void check() const {
        if (_ex) {
            std::rethrow_exception(_ex);
        }
    }

private:
    subscription* _head = nullptr;
    subscription* _tail = nullptr;
    std::exception_ptr _ex;
};

} // namespace shoal
