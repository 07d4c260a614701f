#pragma once

#include "core/small_pool.hh"

#include <cassert>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string_view>
#include <utility>

namespace shoal::net {

namespace internal {
/// One per thread; its address tells threads (shards) apart without a function call.
inline thread_local char tl_thread_key = 0;
} // namespace internal

/// Owns the memory behind one or more `temporary_buffer`s and releases it when the last one
/// goes. Subclasses return memory to where it came from: the heap, an io_uring buffer ring, an
/// RDMA memory pool. Reference counts are not atomic: a buffer and its slices are made on one
/// shard. An owner that calls `stay_home()` (RDMA pool buffers) may also be dropped on another
/// shard: such a drop is handed to `unref_elsewhere`, which sends it home, so its count is
/// only ever touched on its own shard. Slicing (`share`) still belongs on the home shard; hand
/// bytes over with `foreign_buffer`.
class buffer_owner {
public:
    /// Adds a reference.
    void ref() noexcept { ++_refs; }
    /// Drops a reference; dropping the last one calls `release()`. For an owner that stays
    /// home, a drop on another thread goes through `unref_elsewhere` instead.
    void unref() noexcept {
        if (_home && _home != &internal::tl_thread_key) [[unlikely]] {
            unref_elsewhere();
            return;
        }
        if (--_refs == 0) {
            release();
        }
    }

protected:
    virtual ~buffer_owner() = default;
    /// Called once when the last reference is dropped; must free `this` or recycle it.
    virtual void release() noexcept = 0;
    /// Makes the calling thread this owner's home: later drops elsewhere call `unref_elsewhere`.
    void stay_home() noexcept { _home = &internal::tl_thread_key; }
    /// A reference was dropped on a thread other than home (only for owners that `stay_home`):
    /// must have `unref()` run on the home shard.
    virtual void unref_elsewhere() noexcept { std::abort(); }

private:
    unsigned _refs = 1;
    const char* _home = nullptr;
};

/// A contiguous piece of received or to-be-sent bytes with shared ownership: slices made with
/// `share()` keep the underlying memory alive without copying. Move-only; `share()` is the
/// explicit, cheap copy.
class temporary_buffer {
public:
    temporary_buffer() noexcept = default;
    /// Allocates `size` uninitialised bytes on the heap (one allocation for data and owner).
    explicit temporary_buffer(size_t size);
    /// Wraps `size` bytes at `data` owned by `owner` (this takes over one reference).
    temporary_buffer(char* data, size_t size, buffer_owner* owner) noexcept
        : _data(data)
        , _size(size)
        , _owner(owner) {}
    /// Copies `bytes` into a new heap buffer.
    static temporary_buffer copy_of(std::string_view bytes);

    temporary_buffer(temporary_buffer&& o) noexcept
        : _data(std::exchange(o._data, nullptr))
        , _size(std::exchange(o._size, 0))
        , _owner(std::exchange(o._owner, nullptr)) {}
    temporary_buffer& operator=(temporary_buffer&& o) noexcept {
        if (this != &o) {
            reset();
            _data = std::exchange(o._data, nullptr);
            _size = std::exchange(o._size, 0);
            _owner = std::exchange(o._owner, nullptr);
        }
        return *this;
    }
    temporary_buffer(const temporary_buffer&) = delete;
    temporary_buffer& operator=(const temporary_buffer&) = delete;
    [[gnu::always_inline]] ~temporary_buffer() { reset(); }

    /// The first byte (null for a default-constructed buffer).
    const char* get() const noexcept { return _data; }
    /// The first byte, writable (the memory is shared with every slice of it).
    char* get_write() noexcept { return _data; }
    /// The first byte.
    const char* begin() const noexcept { return _data; }
    /// One past the last byte.
    const char* end() const noexcept { return _data + _size; }
    /// Number of bytes.
    size_t size() const noexcept { return _size; }
    /// True when it holds no bytes.
    bool empty() const noexcept { return _size == 0; }
    /// True when it holds at least one byte.
    explicit operator bool() const noexcept { return _size != 0; }
    /// Byte `i` (unchecked).
    char operator[](size_t i) const noexcept { return _data[i]; }
    /// The bytes as a string_view (no copy).
    std::string_view view() const noexcept { return {_data, _size}; }

    /// A new reference to `len` bytes at `offset` of the same memory (no copy).
    temporary_buffer share(size_t offset, size_t len) const noexcept {
        assert(offset + len <= _size);
        if (_owner) {
            _owner->ref();
        }
        return temporary_buffer(_data + offset, len, _owner);
    }
    /// A new reference to all of the bytes (no copy).
    temporary_buffer share() const noexcept { return share(0, _size); }
    /// Drops the first `n` bytes.
    void trim_front(size_t n) noexcept {
        assert(n <= _size);
        _data += n;
        _size -= n;
    }
    /// Drops all but the first `n` bytes.
    void trim(size_t n) noexcept {
        assert(n <= _size);
        _size = n;
    }
    /// Releases the memory now. Inlined: most buffers reset or destroyed were moved from, and
    /// for them this is one test instead of a call (a frame passes through several moves).
    [[gnu::always_inline]] void reset() noexcept {
        if (_owner) {
            drop_owner();
        }
        _data = nullptr;
        _size = 0;
    }

private:
    /// Drops this buffer's reference to its owner.
    void drop_owner() noexcept { std::exchange(_owner, nullptr)->unref(); }

    char* _data = nullptr;
    size_t _size = 0;
    buffer_owner* _owner = nullptr;
};

namespace internal {
/// Heap storage: the owner header and the bytes in one allocation, from the thread's
/// `small_pool`: a small one (an RPC frame's header and arguments, a short reply) then costs no
/// trip through malloc; a larger one goes to operator new as the pool does for it.
class heap_buffer final : public buffer_owner {
public:
    /// A buffer of `size` uninitialised bytes; throws std::bad_alloc.
    static temporary_buffer make(size_t size) {
        const size_t bytes = sizeof(heap_buffer) + size;
        void* mem = pool::allocate(bytes, std::nothrow);
        if (!mem) {
            throw std::bad_alloc();
        }
        auto* owner = new (mem) heap_buffer(bytes);
        return temporary_buffer(reinterpret_cast<char*>(owner + 1), size, owner);
    }

private:
    using pool = shoal::internal::small_pool;

    explicit heap_buffer(size_t bytes) noexcept
        : _bytes(bytes) {}

    void release() noexcept override {
        const size_t bytes = _bytes;
        this->~heap_buffer();
        pool::deallocate(this, bytes);
    }

    size_t _bytes; // the allocation's size, header included
};
} // namespace internal

inline temporary_buffer::temporary_buffer(size_t size)
    : temporary_buffer(internal::heap_buffer::make(size)) {}

inline temporary_buffer temporary_buffer::copy_of(std::string_view bytes) {
    temporary_buffer b(bytes.size());
    if (!bytes.empty()) {
        std::memcpy(b.get_write(), bytes.data(), bytes.size());
    }
    return b;
}

} // namespace shoal::net
