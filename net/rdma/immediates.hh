#pragma once

// Tagged immediates: several users of one connection's WRITE_WITH_IMM events (e.g. a KV commit
// path and a second protocol beside RPC's messages), each on its own channel.

#include "core/future.hh"
#include "net/rdma/memory_region.hh"

#include <cstdint>
#include <memory>

namespace shoal::net::rdma {

namespace internal {
class connection_ref;

/// Channels of tagged immediates per connection: the tag is the immediate's top 4 bits.
inline constexpr unsigned immediate_tags = 16;
/// Bits of a tagged immediate's value.
inline constexpr unsigned immediate_value_bits = 28;
/// Why `next_immediate` fails once channels are open.
inline constexpr const char* tagged_immediates_error =
    "connection::next_immediate(): this connection's immediates are tagged (connection::immediates(tag) "
    "was opened); read them from their channels";
} // namespace internal

/// One user's channel of a connection's immediates (from `connection::immediates(tag)`). A
/// tagged immediate carries the tag (0-15) in its top 4 bits and a 28-bit value; the receiver
/// routes it to the channel of that tag, in order per channel. Both sides must use channels:
/// once one is open, `connection::next_immediate()` fails. Values for a tag nobody opened yet
/// wait for it (holding the peer's receive credits, like unread stream messages: a channel
/// nobody reads stalls the connection's senders). Move-only; destroying it closes the channel
/// (unread values are dropped) and the tag can be opened again.
class immediate_channel {
public:
    /// Largest value a channel carries.
    static constexpr uint32_t max_value = (1u << internal::immediate_value_bits) - 1;

    /// No channel.
    immediate_channel() noexcept = default;
    immediate_channel(immediate_channel&& o) noexcept
        : _ref(std::move(o._ref))
        , _tag(o._tag) {}
    immediate_channel& operator=(immediate_channel&& o) noexcept;
    ~immediate_channel();

    /// RDMA WRITE_WITH_IMM of `src` to `offset` of `dst`; the peer's channel of this tag
    /// receives `value` after the data is visible. Fails at once with std::invalid_argument
    /// when `value` exceeds `max_value` (nothing is sent). Uses one of the peer's credits.
    future<> write_with_imm(local_span src, const remote_region& dst, uint64_t offset, uint32_t value);
    /// The next value the peer sent with this tag (in order); one waiter at a time.
    future<uint32_t> next();
    /// The tag.
    unsigned tag() const noexcept { return _tag; }
    /// True when it is an open channel.
    explicit operator bool() const noexcept { return bool(_ref); }

private:
    friend class connection;
    immediate_channel(std::shared_ptr<internal::connection_ref> ref, unsigned tag) noexcept
        : _ref(std::move(ref))
        , _tag(tag) {}
    std::shared_ptr<internal::connection_ref> _ref;
    unsigned _tag = 0;
};

} // namespace shoal::net::rdma
