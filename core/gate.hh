#pragma once

#include "core/future.hh"

#include <cassert>
#include <optional>
#include <stdexcept>
#include <utility>

namespace shoal {

/// Thrown by `gate::enter()` once the gate is closed.
class gate_closed_exception : public std::runtime_error {
public:
    gate_closed_exception()
        : std::runtime_error("gate closed") {}
};

/// Tracks work in flight so that shutdown can wait for it: work enters the gate and leaves when
/// done; `close()` refuses new work and resolves once everything inside has left.
class gate {
public:
    gate() = default;
    gate(const gate&) = delete;
    gate& operator=(const gate&) = delete;
    ~gate() { assert(_count == 0 && "gate destroyed with work inside"); }

    /// Enters; throws gate_closed_exception when closed.
    void enter() {
        if (_closing) {
            throw gate_closed_exception();
        }
        ++_count;
    }
    /// Enters if open; returns whether it did.
    bool try_enter() noexcept {
        if (_closing) {
            return false;
        }
        ++_count;
        return true;
    }
    /// Leaves; the last one out after `close()` resolves the close future.
    void leave() noexcept {
        assert(_count > 0);
        if (--_count == 0 && _closed) {
            _closed->set_value();
            _closed.reset();
        }
    }
    /// Closes the gate; resolves when no work is left inside. Call once.
    future<> close() {
        assert(!_closing && "gate closed twice");
        _closing = true;
        if (_count == 0) {
            return make_ready_future<>();
        }
        _closed.emplace();
        return _closed->get_future();
    }
    bool is_closed() const noexcept { return _closing; }
    /// Work currently inside.
    size_t count() const noexcept { return _count; }

    /// RAII presence in a gate.
    class holder {
    public:
        holder() noexcept = default;
        explicit holder(gate& g)
            : _g(&g) {
            g.enter();
        }
        holder(holder&& o) noexcept
            : _g(std::exchange(o._g, nullptr)) {}
        holder& operator=(holder&& o) noexcept {
            if (this != &o) {
                release();
                _g = std::exchange(o._g, nullptr);
            }
            return *this;
        }
        ~holder() { release(); }
        void release() noexcept {
            if (_g) {
                std::exchange(_g, nullptr)->leave();
            }
        }

    private:
        gate* _g = nullptr;
    };
    /// Enters and returns the RAII holder; throws when closed.
    holder hold() { return holder(*this); }

private:
    size_t _count = 0;
    bool _closing = false;
    std::optional<promise<>> _closed;
};

/// Runs `func()` inside `g`: fails with gate_closed_exception if closed, else leaves the gate
/// when `func`'s future resolves.
template <typename Func>
auto with_gate(gate& g, Func&& func) {
    using F = futurize_t<std::invoke_result_t<Func>>;
    if (!g.try_enter()) {
        return F(make_exception_future<internal::future_arg_t<F>>(
            std::make_exception_ptr(gate_closed_exception())));
    }
    return futurize_invoke(std::forward<Func>(func)).finally([&g] { g.leave(); });
}

} // namespace shoal
