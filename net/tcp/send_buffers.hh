#pragma once

#include "net/temporary_buffer.hh"

#include <cstddef>

namespace shoal::net::tcp::internal {

/// Size of the buffers output streams gather into over TCP (the sink's `buffer_size_hint`).
constexpr size_t send_buffer_size = 8192;

/// Memory for `data_sink_impl::allocate_buffer` over TCP: buffers of `send_buffer_size` come
/// from a per-shard LIFO cache (a buffer freed on its shard is the next one handed out, still
/// warm in the cache; no malloc/free per gathering buffer); other sizes, and buffers dropped on
/// another shard, use the heap. io_uring's send/sendmsg copy from any user memory into socket
/// buffers at submission, so no registration is needed (see docs/tcp.md).
temporary_buffer allocate_send_buffer(size_t size);

/// Buffers waiting in the calling shard's cache (for tests).
size_t cached_send_buffers() noexcept;

} // namespace shoal::net::tcp::internal
