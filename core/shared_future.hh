#pragma once

#include "core/clock.hh"
#include "core/deadline_waiter.hh"
#include "core/future.hh"
#include "core/future_util.hh"
#include "core/small_pool.hh"

#include <cassert>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

namespace shoal {

/// A future that many can wait for: built from a `future<T>`, it hands every `get_future()`
/// caller its own `future<T>`, which resolves with a copy of the value (`T` must be copyable) or
/// with the same exception. Copies of a `shared_future` share the result. Each waiter may set its
/// own deadline (`get_future(deadline)`), which fails only that waiter with `timed_out_error`.
/// A pending waiter costs one small-pool object. The result is kept until the last copy is
/// gone; a failure nobody asked for is dropped silently (the shared_future consumed it). One
/// shard only.
template <typename T = void>
class shared_future {
public:
    using value_type = internal::stored_type<T>;

    /// An empty shared_future (`valid()` is false) to assign to later.
    shared_future() noexcept = default;
    /// Takes over `f`; its result becomes available to every `get_future()` caller.
    shared_future(future<T>&& f) // NOLINT: implicit, like Seastar's
        : _st(new state()) {
        if (f.available()) {
            _st->resolve(std::move(f));
            return;
        }
        ++_st->refs; // the continuation's reference, dropped once it has run
        (void)std::move(f).then_wrapped([st = _st](future<T> r) noexcept {
            st->resolve(std::move(r));
            st->release();
        });
    }
    shared_future(const shared_future& o) noexcept
        : _st(o._st) {
        if (_st) {
            ++_st->refs;
        }
    }
    shared_future(shared_future&& o) noexcept
        : _st(std::exchange(o._st, nullptr)) {}
    shared_future& operator=(shared_future o) noexcept {
        std::swap(_st, o._st);
        return *this;
    }
    ~shared_future() {
        if (_st) {
            _st->release();
        }
    }

    /// A future of this waiter's own: ready with a copy of the result if it is here, else
    /// resolved when it arrives. The shared_future must be `valid()`.
    future<T> get_future() const {
        assert(_st);
        if (_st->ready) {
            return _st->copy();
        }
        return _st->add_waiter()->pr.get_future();
    }
    /// Like `get_future()`, but this waiter fails with `timed_out_error` if the result is not
    /// here by `deadline` (the others keep waiting).
    future<T> get_future(steady_clock_type::time_point deadline) const {
        assert(_st);
        if (_st->ready) {
            return _st->copy();
        }
        auto* w = _st->add_waiter();
        w->arm_deadline(deadline);
        return w->pr.get_future();
    }
    /// Like `get_future(deadline)` with a deadline `timeout` from now.
    future<T> get_future(steady_clock_type::duration timeout) const {
        return get_future(steady_clock_type::now() + timeout);
    }
    /// Same as `get_future()`.
    operator future<T>() const { return get_future(); }

    /// True unless default-constructed or moved from.
    bool valid() const noexcept { return _st != nullptr; }
    /// True once the result (value or exception) is here.
    bool available() const noexcept { return _st && _st->ready; }
    /// True once the result is here and is an exception.
    bool failed() const noexcept { return available() && _st->ex; }

private:
    struct state;

    /// One pending `get_future()`: its promise, its place among the waiters and optionally its
    /// deadline (the waiter is itself the timer).
    struct waiter final : internal::deadline_waiter {
        SHOAL_SMALL_POOL_ALLOCATED
        explicit waiter(state& s) noexcept
            : st(&s) {}
        void deadline_passed() noexcept override {
            pr.set_exception(std::make_exception_ptr(timed_out_error()));
            st->remove(this);
        }

        state* st;
        promise<T> pr;
        waiter* prev = nullptr;
        waiter* next = nullptr;
    };

    /// The result and the waiters, shared by the copies and the continuation on the source.
    struct state {
        unsigned refs = 1;
        bool ready = false;
        std::optional<value_type> value;
        std::exception_ptr ex;
        waiter* head = nullptr;
        waiter* tail = nullptr;

        future<T> copy() const {
            if (ex) {
                return make_exception_future<T>(ex);
            }
            return make_ready_future<T>(*value);
        }
        waiter* add_waiter() {
            auto* w = new waiter(*this);
            w->prev = tail;
            (tail ? tail->next : head) = w;
            tail = w;
            return w;
        }
        /// Unlinks and frees `w`, whose promise was resolved.
        void remove(waiter* w) noexcept {
            (w->prev ? w->prev->next : head) = w->next;
            (w->next ? w->next->prev : tail) = w->prev;
            w->disarm_deadline();
            delete w;
        }
        void resolve(future<T>&& r) noexcept {
            if (r.failed()) {
                ex = r.get_exception();
            } else {
                value.emplace(r.state().take_value());
            }
            ready = true;
            while (head) {
                if (ex) {
                    head->pr.set_exception(ex);
                } else {
                    head->pr.set_value(*value);
                }
                remove(head);
            }
        }
        void release() noexcept {
            if (--refs == 0) {
                delete this;
            }
        }
    };

    state* _st = nullptr;
};

} // namespace shoal
