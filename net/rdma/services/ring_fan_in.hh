#pragma once

#include "core/future.hh"
#include "net/rdma/connection.hh"
#include "net/rdma/services/ring_channel.hh"

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

namespace shoal::net::rdma {

/// A message a `ring_fan_in` received: which producer sent it and a view of its bytes inside
/// that producer's ring (valid until the next `receive`).
struct fan_in_message {
    unsigned producer = 0;
    std::span<const char> data;
};

/// Many producers into one consumer (docs/rdma.md, "Many producers"): one ring per producer,
/// each exported on its own (a producer's rkey reaches only its ring), drained round robin one
/// message per producer per turn, so a fast producer cannot starve a slow one. A producer whose
/// connection fails stops nothing but itself: the others keep flowing, and its ring can take a
/// new connection (`attach`) on which a new producer resumes. Move-only; used on its shard.
class ring_fan_in {
public:
    /// `producers` rings (at least one) of `capacity` bytes each, made with `opts` (see
    /// `ring_consumer`).
    ring_fan_in(unsigned producers, size_t capacity, ring_consumer_options opts = {});
    ring_fan_in(ring_fan_in&&) noexcept;
    ring_fan_in& operator=(ring_fan_in&&) noexcept;
    ~ring_fan_in();

    /// The ring of producer `i`, to hand to that producer.
    remote_region descriptor(unsigned i) const noexcept { return _rings[i].descriptor(); }
    /// Takes the doorbells of producer `i`'s connection on the channels of `tags` (see
    /// `ring_consumer::attach`).
    void attach(unsigned i, connection c, ring_tags tags = {}) { _rings[i].attach(std::move(c), tags); }
    /// The next message, taking producers in turn (one message each, skipping those with
    /// nothing announced). Gives the previous message's space back. Fails only when every
    /// producer's connection has failed and nothing is left (with the first ring's error).
    /// One receive at a time.
    future<fan_in_message> receive();
    /// The ring of producer `i` (its stats, its capacity).
    const ring_consumer& ring(unsigned i) const noexcept { return _rings[i]; }
    /// Number of producers.
    unsigned producers() const noexcept { return unsigned(_rings.size()); }

private:
    struct waker {
        std::optional<promise<>> waiter;
        static void wake(void* self) noexcept;
    };
    std::optional<fan_in_message> scan();
    future<fan_in_message> wait_and_receive();
    void unhook() noexcept;

    std::unique_ptr<waker> _waker; // outlives the rings' notifications (declared first)
    std::vector<ring_consumer> _rings;
    unsigned _next = 0; // the producer whose turn is next
    int _held = -1;     // the producer whose message was handed out last
};

} // namespace shoal::net::rdma
