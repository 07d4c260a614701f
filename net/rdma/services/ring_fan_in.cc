// Many producers into one consumer: one ring per producer, drained round robin.
#include "net/rdma/services/ring_fan_in.hh"

#include "core/coroutine.hh"
#include "net/rdma/error.hh"

#include <stdexcept>

namespace shoal::net::rdma {

ring_fan_in::ring_fan_in(unsigned producers, size_t capacity, ring_consumer_options opts)
    : _waker(std::make_unique<waker>()) {
    if (producers == 0) {
        throw std::invalid_argument("ring_fan_in: no producers");
    }
    _rings.reserve(producers);
    for (unsigned i = 0; i < producers; ++i) {
        _rings.emplace_back(capacity, opts);
        _rings.back().notify(&waker::wake, _waker.get());
    }
}

ring_fan_in::ring_fan_in(ring_fan_in&&) noexcept = default;

ring_fan_in& ring_fan_in::operator=(ring_fan_in&& o) noexcept {
    if (this != &o) {
        unhook();
        _rings = std::move(o._rings);
        _waker = std::move(o._waker);
        _next = o._next;
        _held = o._held;
    }
    return *this;
}

ring_fan_in::~ring_fan_in() {
    unhook();
}

void ring_fan_in::unhook() noexcept {
    for (auto& r : _rings) {
        if (r) {
            r.notify(nullptr, nullptr);
        }
    }
    _rings.clear(); // closes the connections, revokes the rings
    if (_waker && _waker->waiter) {
        auto pr = std::move(*_waker->waiter);
        _waker->waiter.reset();
        pr.set_exception(std::make_exception_ptr(connection_closed("the RDMA ring fan-in was destroyed")));
    }
}

void ring_fan_in::waker::wake(void* self) noexcept {
    auto* w = static_cast<waker*>(self);
    if (w->waiter) {
        auto pr = std::move(*w->waiter);
        w->waiter.reset();
        pr.set_value();
    }
}

std::optional<fan_in_message> ring_fan_in::scan() {
    if (_held >= 0) {
        _rings[unsigned(_held)].release();
        _held = -1;
    }
    const unsigned n = producers();
    for (unsigned k = 0; k < n; ++k) {
        const unsigned i = (_next + k) % n;
        if (auto m = _rings[i].try_receive()) {
            _next = (i + 1) % n;
            _held = int(i);
            return fan_in_message{i, *m};
        }
    }
    return std::nullopt;
}

future<fan_in_message> ring_fan_in::receive() {
    if (_waker->waiter) {
        return make_exception_future<fan_in_message>(
            std::logic_error("ring_fan_in::receive() called while another is pending"));
    }
    if (auto m = scan()) {
        return make_ready_future<fan_in_message>(*m);
    }
    return wait_and_receive();
}

future<fan_in_message> ring_fan_in::wait_and_receive() {
    for (;;) {
        if (auto m = scan()) {
            co_return *m;
        }
        bool all_failed = true;
        for (const auto& r : _rings) {
            all_failed = all_failed && r.error();
        }
        if (all_failed) {
            std::rethrow_exception(_rings[0].error());
        }
        _waker->waiter.emplace();
        co_await _waker->waiter->get_future();
    }
}

} // namespace shoal::net::rdma
