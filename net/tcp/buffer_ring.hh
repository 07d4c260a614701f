#pragma once

#include "core/reactor.hh"
#include "core/task.hh"
#include "net/temporary_buffer.hh"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace shoal::net::tcp::internal {

/// Something waiting for receive buffers: a connection whose receive stopped with ENOBUFS.
class buffer_waiter {
public:
    /// The ring has buffers again (or is going away: check `reactor::stopping()`).
    virtual void buffers_available() noexcept = 0;

protected:
    ~buffer_waiter() = default;
};

/// One shard's ring of provided receive buffers (io_uring "buffer select" with a mapped buffer
/// ring). Every connection of the shard receives into it with buffer select; the kernel picks a
/// buffer per receive. A received buffer becomes a `temporary_buffer` whose owner puts it
/// back into the ring when the reader drops it, so the bytes reach the reader without a copy.
///
/// Cache warmth and memory: the kernel takes buffers from the ring in FIFO order, and each receive
/// fills one; a connection with bytes waiting re-arms at once, so a busy shard cycles through
/// whatever the ring holds. A ring holding all `recv_buffers` would cycle the shard through all of
/// them (32 MB by default), touching every page of them, so a shard serving thousands of mostly
/// idle connections would keep the whole pool resident, and a batch of large messages would push
/// everything out of the caches before it is sent on. So the ring holds only `config::ring_depth`
/// buffers, however many receives are armed (an armed receive on an idle connection takes no
/// buffer); the rest wait on a LIFO free list, and a buffer that comes back is the next one given
/// to the kernel. When receives find the ring empty (ENOBUFS) the ring holds twice as many (up to
/// the pool), and it shrinks back by half after a whole pool's worth of receives without a
/// shortage. A receive that finds the ring empty leaves its bytes in the kernel's socket buffer
/// until buffers return, the way an epoll loop reads one buffer at a time.
///
/// Readers that keep buffers would drain the pool and stall every connection of the shard, so
/// when fewer than `config::copy_below` buffers are left, received bytes are copied into heap
/// memory instead and the ring buffer goes back at once. Connections whose receive stopped on
/// an empty ring wait here and are re-armed (from a task, never re-entrantly) once buffers
/// return.
///
/// Lifetime: created on a shard's first accept or receive, it keeps one request in the ring (a poll
/// on an eventfd nobody writes) that the reactor cancels when it stops; then the ring is
/// unregistered while the io_uring still exists, and the memory is freed once readers have dropped
/// every buffer they still hold.
class buffer_ring final : public io_completion, private task {
public:
    /// The calling shard's ring, set up on first use. Throws std::system_error when the kernel
    /// refuses (io_uring without IORING_REGISTER_PBUF_RING, kernels before 5.19).
    static buffer_ring& local();

    /// The buffer group id to put in SQEs (IOSQE_BUFFER_SELECT).
    uint16_t group() const noexcept { return _group; }
    /// Size of each buffer.
    size_t buffer_size() const noexcept { return _buf_size; }
    /// Buffers not lent to readers (in the ring or on the free list), as far as this shard has
    /// seen completions.
    unsigned available() const noexcept { return _count - _outstanding; }

    /// Turns buffer `bid`, filled with `len` received bytes, into a temporary_buffer: the ring's
    /// memory itself, or a heap copy when the ring runs low (the ring buffer then goes back now).
    temporary_buffer take(unsigned bid, size_t len);

    /// Registers `w` to be told when buffers are back; at most once per waiter.
    void wait_for_buffers(buffer_waiter& w);
    /// Forgets `w` (a connection going away).
    void cancel_wait(buffer_waiter& w) noexcept;

    /// Counts a receive armed on this ring until its last completion arrived: the ring's memory
    /// stays while the kernel may still name one of its buffers in a completion.
    void add_user() noexcept {
        ++_users;
        top_up();
    }
    /// A receive counted by `add_user` got its last completion; a detached ring that nobody
    /// uses any more frees itself.
    void remove_user() noexcept {
        --_users;
        maybe_free();
    }

private:
    class owner;
    buffer_ring(unsigned count, unsigned depth, size_t buf_size, unsigned copy_below);
    ~buffer_ring();
    void setup();
    void recycle(unsigned bid) noexcept;
    void top_up() noexcept;
    void detach() noexcept;
    void maybe_free() noexcept;
    void complete(int result, uint32_t flags) noexcept override;
    void run_and_dispose() noexcept override;
    void arm_sentinel();

    unsigned _count;
    unsigned _depth;
    unsigned _target;             // buffers to keep in the kernel's ring: _depth, more after shortages
    unsigned _since_shortage = 0; // buffers taken since the last shortage or shrink
    unsigned _in_ring = 0;        // given to the kernel and not yet seen in a completion
    size_t _buf_size;
    unsigned _copy_below;
    unsigned _wake_at;
    unsigned _mask;
    unsigned _shard;
    uint16_t _group = 0;
    bool _registered = false;
    bool _detached = false;
    bool _sentinel_pending = false;
    bool _notify_scheduled = false;
    int _sentinel_fd = -1;
    unsigned _outstanding = 0; // buffers handed to readers without a copy
    unsigned _users = 0;       // receives armed on this ring
    io_uring_buf_ring* _ring = nullptr;
    char* _memory = nullptr; // the buffers, 2 MB aligned inside the mapping
    char* _map = nullptr;
    size_t _map_bytes = 0;
    size_t _ring_bytes = 0;
    size_t _memory_bytes = 0;
    std::unique_ptr<owner[]> _owners;
    std::vector<uint16_t> _free; // LIFO: the most recently returned buffer goes out first
    std::vector<buffer_waiter*> _waiters;
};

} // namespace shoal::net::tcp::internal
