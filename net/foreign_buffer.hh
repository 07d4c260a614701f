#pragma once

#include "net/temporary_buffer.hh"

#include <cstddef>

namespace shoal::net {

/// Received bytes handed to another shard (a payload forwarded to the shard that owns its key)
/// while their home shard may keep slices of the same memory. `temporary_buffer` reference
/// counts are not atomic, so a buffer's owner must only be touched on its home shard: a
/// foreign_buffer keeps one home reference, which only the home shard creates and drops, and
/// the receiving shard gets a buffer of its own whose count lives there. When the receiving
/// side drops the last slice, the home reference is dropped on the home shard (one message
/// back). Buffers of at most `copy_threshold` bytes are copied instead: cheaper than the
/// message, and then nothing is shared. Move-only; make it on the home shard, move it to the
/// other shard (in a `submit_to` lambda), `take()` it there.
class foreign_buffer {
public:
    /// Bytes up to this size are copied rather than shared.
    static constexpr size_t copy_threshold = 512;

    /// Nothing.
    foreign_buffer() noexcept = default;
    /// A hand-off of `buf`'s bytes; call on `buf`'s shard. `buf` stays usable there.
    explicit foreign_buffer(const temporary_buffer& buf);
    foreign_buffer(foreign_buffer&& o) noexcept;
    foreign_buffer& operator=(foreign_buffer&& o) noexcept;
    foreign_buffer(const foreign_buffer&) = delete;
    foreign_buffer& operator=(const foreign_buffer&) = delete;
    /// Drops the bytes if nobody took them (the home reference goes home).
    ~foreign_buffer();

    /// The bytes as a buffer of the calling shard (slice it, keep it, drop it there); empties
    /// this. No copy unless the bytes were copied at creation.
    temporary_buffer take() &&;
    /// Number of bytes.
    size_t size() const noexcept { return _size; }
    /// True when it holds no bytes.
    bool empty() const noexcept { return _size == 0; }

private:
    void drop() noexcept;

    temporary_buffer _copy;                // small: a private copy, no home reference
    temporary_buffer* _home_ref = nullptr; // large: a reference made and dropped on `_home`
    size_t _size = 0;
    unsigned _home = 0;
};

} // namespace shoal::net
