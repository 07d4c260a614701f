#include "net/tcp/send_buffers.hh"

#include "core/smp.hh"

#include <cstdlib>
#include <new>

namespace shoal::net::tcp::internal {

namespace {

class send_block;

/// One shard's free send blocks, newest first.
struct send_cache {
    /// More than this stays on the heap: 2 MB of idle buffers per shard at most.
    static constexpr size_t max_blocks = 256;
    send_block* head = nullptr;
    size_t count = 0;
    bool alive = true;
    ~send_cache();
};

thread_local send_cache tl_cache;

/// A send buffer and its owner header in one allocation; recycled into its shard's cache.
class send_block final : public buffer_owner {
public:
    /// A fresh block of `send_buffer_size` bytes for the calling shard.
    static send_block* create() {
        void* mem = std::malloc(sizeof(send_block) + send_buffer_size);
        if (!mem) {
            throw std::bad_alloc();
        }
        return new (mem) send_block(this_shard_id());
    }
    /// Hands the block out as a buffer (its count restarts at one).
    temporary_buffer hand_out() noexcept {
        if (_recycled) {
            ref();
        }
        return temporary_buffer(reinterpret_cast<char*>(this + 1), send_buffer_size, this);
    }
    /// Frees the memory.
    void destroy() noexcept {
        this->~send_block();
        std::free(this);
    }

    send_block* _next = nullptr;

private:
    explicit send_block(unsigned shard) noexcept
        : _shard(shard) {}

    void release() noexcept override {
        send_cache& c = tl_cache;
        if (_shard != this_shard_id() || !c.alive || c.count >= send_cache::max_blocks) {
            destroy(); // malloc'ed memory may be freed on any thread
            return;
        }
        _recycled = true;
        _next = c.head;
        c.head = this;
        ++c.count;
    }

    unsigned _shard;
    bool _recycled = false;
};

send_cache::~send_cache() {
    alive = false;
    while (head) {
        send_block* b = head;
        head = b->_next;
        b->destroy();
    }
}

} // namespace

temporary_buffer allocate_send_buffer(size_t size) {
    if (size != send_buffer_size) {
        return temporary_buffer(size);
    }
    send_cache& c = tl_cache;
    if (c.head) {
        send_block* b = c.head;
        c.head = b->_next;
        --c.count;
        return b->hand_out();
    }
    return send_block::create()->hand_out();
}

size_t cached_send_buffers() noexcept {
    return tl_cache.count;
}

} // namespace shoal::net::tcp::internal
