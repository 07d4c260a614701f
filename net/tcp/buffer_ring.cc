#include "net/tcp/buffer_ring.hh"

#include "core/log.hh"
#include "core/smp.hh"
#include "net/tcp/internal.hh"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

namespace shoal::net::tcp::internal {

namespace {
thread_local buffer_ring* tl_ring = nullptr;
/// First buffer group id tried; the next ones are tried if something else took it.
constexpr uint16_t first_group = 0x5443; // "TC"
} // namespace

/// Owns one buffer of the ring while a reader holds it; puts it back when the last slice goes.
class buffer_ring::owner final : public buffer_owner {
public:
    void init(buffer_ring* ring, unsigned bid) noexcept {
        _ring = ring;
        _bid = bid;
    }
    /// Called when the buffer is handed out: owners are reused, their count restarts at one.
    void hand_out() noexcept {
        if (!_fresh) {
            ref();
        }
        _fresh = false;
    }

private:
    void release() noexcept override {
        buffer_ring* ring = _ring;
        unsigned bid = _bid;
        if (this_shard_id() != ring->_shard) {
            // A buffer that travelled to another shard goes home to be recycled there.
            (void)submit_to(ring->_shard, [ring, bid] { ring->recycle(bid); });
            return;
        }
        ring->recycle(bid);
    }

    buffer_ring* _ring = nullptr;
    unsigned _bid = 0;
    bool _fresh = true;
};

buffer_ring& buffer_ring::local() {
    if (!tl_ring) {
        if (local_reactor().stopping()) {
            throw std::system_error(ECANCELED, std::system_category(), "tcp: the reactor is stopping");
        }
        config cfg = get_config();
        unsigned count = std::clamp(cfg.recv_buffers, 2u, 32768u);
        if (count & (count - 1)) {
            count = 1u << (32 - __builtin_clz(count)); // round up to a power of two
            count = std::min(count, 32768u);
        }
        size_t size = std::max<size_t>(cfg.recv_buffer_size, 64);
        unsigned copy_below = cfg.copy_below ? std::min(cfg.copy_below, count - 1) : count / 4;
        unsigned depth = std::clamp(cfg.ring_depth, 1u, count);
        auto* r = new buffer_ring(count, depth, size, copy_below);
        try {
            r->setup();
        } catch (...) {
            delete r;
            throw;
        }
        tl_ring = r;
    }
    return *tl_ring;
}

buffer_ring::buffer_ring(unsigned count, unsigned depth, size_t buf_size, unsigned copy_below)
    : _count(count)
    , _depth(depth)
    , _target(depth)
    , _buf_size(buf_size)
    , _copy_below(copy_below)
    , _wake_at(std::max(1u, copy_below / 2))
    , _mask(count - 1)
    , _shard(this_shard_id()) {}

void buffer_ring::setup() {
    long page = ::sysconf(_SC_PAGESIZE);
    _ring_bytes = (_count * sizeof(io_uring_buf) + size_t(page) - 1) / size_t(page) * size_t(page);
    _memory_bytes = _count * _buf_size;
    void* ring = ::mmap(nullptr, _ring_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ring == MAP_FAILED) {
        throw std::system_error(errno, std::system_category(), "tcp: mmap of the buffer ring");
    }
    _ring = static_cast<io_uring_buf_ring*>(ring);
    // The buffers go on 2 MB pages where the kernel allows it (transparent huge pages, on
    // request): the kernel's copies into and out of them then miss the TLB far less often.
    constexpr size_t huge = 2 << 20;
    _map_bytes = _memory_bytes + huge;
    void* mem = ::mmap(nullptr, _map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        throw std::system_error(errno, std::system_category(), "tcp: mmap of the receive buffers");
    }
    _map = static_cast<char*>(mem);
    _memory = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(_map) + huge - 1) & ~uintptr_t(huge - 1));
    ::madvise(_memory, (_memory_bytes + huge - 1) & ~(huge - 1), MADV_HUGEPAGE); // advice only
    _owners = std::make_unique<owner[]>(_count);

    io_uring& uring = local_reactor().ring();
    int rc = -EEXIST;
    for (uint16_t g = first_group; rc == -EEXIST && g < first_group + 64; ++g) {
        io_uring_buf_reg reg{};
        reg.ring_addr = reinterpret_cast<uint64_t>(_ring);
        reg.ring_entries = _count;
        reg.bgid = g;
        rc = io_uring_register_buf_ring(&uring, &reg, 0);
        if (rc == 0) {
            _group = g;
        }
    }
    if (rc < 0) {
        throw std::system_error(-rc, std::system_category(), "tcp: io_uring_register_buf_ring");
    }
    _registered = true;
    io_uring_buf_ring_init(_ring);
    _free.reserve(_count);
    for (unsigned bid = 0; bid < _count; ++bid) {
        _owners[bid].init(this, bid);
        _free.push_back(uint16_t(_count - 1 - bid)); // buffer 0 on top
    }
    top_up();

    _sentinel_fd = ::eventfd(0, EFD_CLOEXEC);
    if (_sentinel_fd < 0) {
        throw std::system_error(errno, std::system_category(), "tcp: eventfd");
    }
    arm_sentinel();
    tcp_log.debug("buffer ring {}: {} buffers of {} bytes", _group, _count, _buf_size);
}

buffer_ring::~buffer_ring() {
    if (_registered && !_detached) {
        io_uring_unregister_buf_ring(&local_reactor().ring(), _group);
    }
    if (_sentinel_fd >= 0) {
        ::close(_sentinel_fd);
    }
    if (_map) {
        ::munmap(_map, _map_bytes);
    }
    if (_ring) {
        ::munmap(_ring, _ring_bytes);
    }
}

void buffer_ring::arm_sentinel() {
    io_uring_sqe* sqe = local_reactor().get_sqe();
    io_uring_prep_poll_add(sqe, _sentinel_fd, POLLIN);
    io_uring_sqe_set_data(sqe, static_cast<io_completion*>(this));
    _sentinel_pending = true;
}

void buffer_ring::complete(int result, uint32_t) noexcept {
    // The sentinel poll only completes when the reactor cancels everything on its way out.
    _sentinel_pending = false;
    if (result != -ECANCELED && !local_reactor().stopping()) {
        try {
            arm_sentinel();
            return;
        } catch (...) {
        }
    }
    detach();
}

void buffer_ring::detach() noexcept {
    if (_detached) {
        return;
    }
    _detached = true;
    if (tl_ring == this) {
        tl_ring = nullptr;
    }
    if (_registered) {
        int rc = io_uring_unregister_buf_ring(&local_reactor().ring(), _group);
        if (rc < 0) {
            tcp_log.warn("cannot unregister buffer ring {}: {}", _group, std::strerror(-rc));
        }
    }
    // Connections still waiting learn that the reactor is stopping.
    auto waiters = std::move(_waiters);
    _waiters.clear();
    for (auto* w : waiters) {
        w->buffers_available();
    }
    maybe_free();
}

void buffer_ring::maybe_free() noexcept {
    if (_detached && _outstanding == 0 && _users == 0 && !_notify_scheduled && !_sentinel_pending) {
        delete this;
    }
}

temporary_buffer buffer_ring::take(unsigned bid, size_t len) {
    auto& st = local_stats();
    char* data = _memory + size_t(bid) * _buf_size;
    if (_in_ring > 0) {
        --_in_ring;
    }
    if (++_since_shortage >= _count && _target > _depth) {
        // A whole pool's worth of receives found buffers: give the ring back some of its growth.
        _target = std::max(_depth, _target / 2);
        _since_shortage = 0;
    }
    if (available() > _copy_below && !_detached) {
        ++_outstanding;
        ++st.zero_copy_buffers;
        owner& o = _owners[bid];
        o.hand_out();
        top_up();
        return temporary_buffer(data, len, &o);
    }
    ++st.copied_buffers;
    ++_outstanding; // recycle() below gives it back
    temporary_buffer copy;
    try {
        copy = temporary_buffer::copy_of(std::string_view(data, len));
    } catch (...) {
        recycle(bid);
        throw;
    }
    recycle(bid);
    return copy;
}

void buffer_ring::recycle(unsigned bid) noexcept {
    --_outstanding;
    if (_detached) {
        maybe_free();
        return;
    }
    _free.push_back(uint16_t(bid));
    top_up();
    if (!_waiters.empty() && !_notify_scheduled && available() >= _wake_at) {
        _notify_scheduled = true;
        schedule(static_cast<task*>(this));
    }
}

void buffer_ring::top_up() noexcept {
    // `_in_ring` is an upper bound (it drops only when a completion shows a buffer taken), so
    // filling up to the target never overruns the ring's entries.
    if (_detached) {
        return;
    }
    const unsigned target = _target;
    unsigned added = 0;
    while (_in_ring < target && !_free.empty()) {
        unsigned bid = _free.back();
        _free.pop_back();
        io_uring_buf_ring_add(_ring, _memory + size_t(bid) * _buf_size, unsigned(_buf_size), uint16_t(bid),
                              int(_mask), int(added));
        ++added;
        ++_in_ring;
    }
    if (added) {
        io_uring_buf_ring_advance(_ring, int(added));
    }
}

void buffer_ring::wait_for_buffers(buffer_waiter& w) {
    _waiters.push_back(&w);
    // A receive found the ring empty: offer more buffers at once from now on.
    if (_target < _count) {
        _target = std::min(_count, 2 * _target);
        top_up();
    }
    _since_shortage = 0;
    if (!_notify_scheduled && (available() >= _wake_at || _detached)) {
        _notify_scheduled = true;
        schedule(static_cast<task*>(this));
    }
}

void buffer_ring::cancel_wait(buffer_waiter& w) noexcept {
    _waiters.erase(std::remove(_waiters.begin(), _waiters.end(), &w), _waiters.end());
}

void buffer_ring::run_and_dispose() noexcept {
    _notify_scheduled = false;
    auto waiters = std::move(_waiters);
    _waiters.clear();
    for (auto* w : waiters) {
        w->buffers_available();
    }
    maybe_free();
}

} // namespace shoal::net::tcp::internal
