#pragma once

#include <atomic>
#include <cstddef>

namespace shoal {

/// A bounded single-producer/single-consumer ring of `N` trivially copyable items (N a power of
/// two). Producer and consumer each cache the other's index, so a batch costs one acquire load
/// and one release store on each side in the common case.
template <typename T, size_t N>
class spsc_queue {
    static_assert((N & (N - 1)) == 0, "capacity must be a power of two");

public:
    /// Producer: appends up to `n` items; returns how many fit.
    size_t push(const T* items, size_t n) noexcept {
        size_t tail = _tail.load(std::memory_order_relaxed);
        if (N - (tail - _cached_head) < n) {
            _cached_head = _head.load(std::memory_order_acquire);
        }
        size_t room = N - (tail - _cached_head);
        if (n > room) {
            n = room;
        }
        for (size_t i = 0; i < n; ++i) {
            _items[(tail + i) & (N - 1)] = items[i];
        }
        if (n) {
            _tail.store(tail + n, std::memory_order_release);
        }
        return n;
    }
    /// Consumer: removes up to `max` items into `out`; returns how many.
    size_t pop(T* out, size_t max) noexcept {
        size_t head = _head.load(std::memory_order_relaxed);
        if (_cached_tail == head) {
            _cached_tail = _tail.load(std::memory_order_acquire);
        }
        size_t n = _cached_tail - head;
        if (n > max) {
            n = max;
        }
        for (size_t i = 0; i < n; ++i) {
            out[i] = _items[(head + i) & (N - 1)];
        }
        if (n) {
            _head.store(head + n, std::memory_order_release);
        }
        return n;
    }
    /// Either side: true when no item is visible to the consumer.
    bool empty() const noexcept {
        return _head.load(std::memory_order_acquire) == _tail.load(std::memory_order_acquire);
    }

private:
    alignas(64) std::atomic<size_t> _head{0};
    size_t _cached_tail = 0; // consumer's view of _tail
    alignas(64) std::atomic<size_t> _tail{0};
    size_t _cached_head = 0; // producer's view of _head
    alignas(64) T _items[N];
};

} // namespace shoal
