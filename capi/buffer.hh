#pragma once

// The state behind a shoal_buffer: a buffer of a shard's registered RDMA pool, used without a
// copy by the ring and remote-pool calls.

#include "capi/shard_handle.hh"
#include "net/rdma/memory_pool.hh"
#include "shoal/shoal_c.h"

#include <atomic>
#include <cstddef>
#include <memory>

namespace shoal::capi {

/// A pool buffer owned by a C handle. The buffer itself is touched on its shard only; its
/// address and size are readable from any thread.
class buffer_state final : public shard_handle {
public:
    using shard_handle::shard_handle;

    /// Allocates `size` bytes on its shard (blocking; host thread).
    void allocate(size_t size);
    /// The bytes (null once closed).
    char* data() const noexcept { return _data.load(std::memory_order_acquire); }
    /// The size asked for.
    size_t size() const noexcept { return _size; }
    /// On its shard: `len` bytes at `offset`, holding the memory until the operation using the
    /// span completes. Throws std::logic_error once the buffer was freed.
    net::rdma::local_span span(size_t offset, size_t len) const;
    /// On its shard: the pool buffer itself, for calls that take a `net::rdma::buffer` and hold
    /// its memory themselves (the KV client's). Throws closed_error once the buffer was freed.
    net::rdma::buffer& pool_buffer();

private:
    future<> close_on_shard() noexcept override;
    void abandon() noexcept override;

    net::rdma::buffer _buf;
    std::atomic<char*> _data{nullptr};
    size_t _size = 0;
};

/// The state of `b` when it can serve an operation of a handle on `shard` over `len` bytes at
/// `offset`; otherwise null, with the status in `rc` and the thread's last error set.
std::shared_ptr<buffer_state> usable_buffer(const shoal_buffer* b, unsigned shard, size_t offset, size_t len,
                                            const char* what, int& rc);

} // namespace shoal::capi

/// The C handle.
struct shoal_buffer {
    std::shared_ptr<shoal::capi::buffer_state> state;
};
