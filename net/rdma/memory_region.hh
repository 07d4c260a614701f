#pragma once

#include "net/temporary_buffer.hh"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

struct ibv_mr; // <infiniband/verbs.h>: only the .cc files that call verbs include it

namespace shoal::net::rdma {

class buffer;

/// What a peer may do to exported memory (combine with |).
enum class access : unsigned {
    none = 0,
    remote_read = 1,
    remote_write = 2,
    remote_atomic = 4,
    /// Memory windows may be bound on the registration (`memory_window`); grants no access itself.
    mw_bind = 8,
};
/// Both sets of rights.
constexpr access operator|(access a, access b) noexcept {
    return access(unsigned(a) | unsigned(b));
}
/// Whether `set` includes right `bit`.
constexpr bool has(access set, access bit) noexcept {
    return (unsigned(set) & unsigned(bit)) != 0;
}

/// Remote memory a peer exported: where it is, the key that grants access, and how long it is.
/// Plain data; send it to whoever should access it (connect/accept private data carries one).
struct remote_region {
    uint64_t addr = 0;
    uint32_t rkey = 0;
    uint64_t length = 0;

    /// The `len` bytes at `offset` (no check: the remote side enforces the bounds).
    remote_region slice(uint64_t offset, uint64_t len) const noexcept { return {addr + offset, rkey, len}; }
    bool operator==(const remote_region&) const = default;
};

/// One reference on pool memory (a `buffer`'s owner): the memory is not handed out again while
/// a hold on it exists. Copying adds a reference (not atomic: use it on the memory's shard).
class memory_hold {
public:
    /// Holds nothing.
    memory_hold() noexcept = default;
    /// Adds a reference on `owner` (may be null: holds nothing).
    explicit memory_hold(net::buffer_owner* owner) noexcept
        : _owner(owner) {
        if (_owner) {
            _owner->ref();
        }
    }
    memory_hold(const memory_hold& o) noexcept
        : memory_hold(o._owner) {}
    memory_hold(memory_hold&& o) noexcept
        : _owner(std::exchange(o._owner, nullptr)) {}
    memory_hold& operator=(memory_hold o) noexcept {
        std::swap(_owner, o._owner);
        return *this;
    }
    ~memory_hold() { reset(); }
    /// Drops the reference now.
    void reset() noexcept {
        if (_owner) {
            std::exchange(_owner, nullptr)->unref();
        }
    }
    /// Hands the reference over as a temporary_buffer of `len` bytes at `data` (which must lie in
    /// the held memory); this hold is empty afterwards.
    net::temporary_buffer into_temporary_buffer(char* data, size_t len) && noexcept {
        return net::temporary_buffer(data, len, std::exchange(_owner, nullptr));
    }
    /// True when it holds memory.
    explicit operator bool() const noexcept { return _owner != nullptr; }

private:
    net::buffer_owner* _owner = nullptr;
};

/// Registered local memory a one-sided operation reads from or writes into. A span of a pool
/// buffer (`span_of`) holds that buffer: an operation keeps it until its completion, so memory
/// whose last user handle is dropped (or whose operation was abandoned or aborted) is not handed
/// out again while the device may still access it. A span built from other registered memory
/// (`memory_region::span`, or by hand) holds nothing: that memory must stay registered until
/// the operation completes (deregistering it makes the operation fail, never stray).
struct local_span {
    char* addr = nullptr;
    uint32_t length = 0;
    uint32_t lkey = 0;
    memory_hold hold;
};

/// A span of `len` bytes at `offset` of a pool buffer (checked against its capacity: throws
/// std::out_of_range); it holds the buffer (see `local_span`). Defined in memory_pool.hh.
inline local_span span_of(const buffer& b, size_t offset, size_t len);

/// User memory registered with the calling shard's protection domain (RAII: deregistered when
/// destroyed). Use it as the local side of one-sided operations, or export it.
class memory_region {
public:
    memory_region() noexcept = default;
    memory_region(memory_region&& o) noexcept
        : _mr(std::exchange(o._mr, nullptr))
        , _shard(o._shard)
        , _data(o._data)
        , _size(o._size)
        , _lkey(o._lkey)
        , _rkey(o._rkey) {}
    memory_region& operator=(memory_region&& o) noexcept;
    memory_region(const memory_region&) = delete;
    memory_region& operator=(const memory_region&) = delete;
    ~memory_region() { deregister(); }

    /// Start of the registered memory.
    char* data() const noexcept { return _data; }
    /// Registered length in bytes.
    size_t size() const noexcept { return _size; }
    /// The local key (what a local_span carries).
    uint32_t lkey() const noexcept { return _lkey; }
    /// The remote key a peer uses (works only for the rights granted).
    uint32_t rkey() const noexcept { return _rkey; }
    /// The verbs registration (memory windows are bound on it).
    ibv_mr* mr() const noexcept { return _mr; }
    /// True while registered.
    explicit operator bool() const noexcept { return _mr != nullptr; }
    /// `len` bytes at `offset`; throws std::out_of_range past the end.
    local_span span(size_t offset, size_t len) const;
    /// The whole region as peers address it.
    remote_region remote() const noexcept { return {reinterpret_cast<uintptr_t>(_data), _rkey, _size}; }
    /// Deregisters now: the keys stop working (remote accesses fail from then on).
    void deregister() noexcept;

private:
    friend memory_region register_memory(void* addr, size_t len, access a);
    ibv_mr* _mr = nullptr;
    unsigned _shard = 0;
    // The registration's address, length and keys, copied from `_mr` when registered: the
    // accessors stay inline without the verbs header.
    char* _data = nullptr;
    size_t _size = 0;
    uint32_t _lkey = 0;
    uint32_t _rkey = 0;
};

/// Registers [addr, addr + len) on the calling shard for local use and the remote access `a`.
/// Throws rdma_error (with the memlock limit) when registration fails. Not for the data path:
/// each call is an ibv_reg_mr.
memory_region register_memory(void* addr, size_t len, access a = access::none);

/// Memory exported to peers: a registration of exactly the exported range with exactly the
/// granted access, so a peer can reach nothing else. `revoke()` (or destruction) deregisters
/// it; later accesses with its rkey fail on the peer with a remote access error. An export of a
/// pool buffer holds that buffer until the revocation: a peer can never write into pool memory
/// handed out again.
class exported_region {
public:
    exported_region() noexcept = default;
    /// Exports the registration `mr` as it is; `hold` (if any) is dropped once it is revoked.
    explicit exported_region(memory_region mr, memory_hold hold = {}) noexcept
        : _mr(std::move(mr))
        , _hold(std::move(hold)) {}
    exported_region(exported_region&&) noexcept = default;
    /// Revokes the region held before taking over `o`'s.
    exported_region& operator=(exported_region&& o) noexcept {
        if (this != &o) {
            revoke();
            _mr = std::move(o._mr);
            _hold = std::move(o._hold);
        }
        return *this;
    }
    /// Revokes it (deregistration first, then the hold on pool memory is dropped).
    ~exported_region() { revoke(); }
    /// What to hand to the peer.
    remote_region descriptor() const noexcept { return _mr.remote(); }
    /// The local view of the same memory.
    local_span span(size_t offset, size_t len) const {
        local_span s = _mr.span(offset, len);
        s.hold = _hold;
        return s;
    }
    /// Start of the exported memory.
    char* data() const noexcept { return _mr.data(); }
    /// Exported length in bytes.
    size_t size() const noexcept { return _mr.size(); }
    /// Deregisters now: the peer's later accesses fail; then the exported pool memory (if any)
    /// may be handed out again.
    void revoke() noexcept {
        _mr.deregister();
        _hold.reset();
    }
    /// True once revoked (also for a default-constructed one).
    bool revoked() const noexcept { return !_mr; }

private:
    memory_region _mr;
    memory_hold _hold; // exported pool memory; dropped only after the deregistration
};

/// Exports [addr, addr + len) of any memory with access `a` (at least one remote right).
exported_region export_region(void* addr, size_t len, access a);
/// Exports `len` bytes at `offset` of a pool buffer (the whole buffer by default); the export
/// holds the buffer until it is revoked, whatever happens to `b`.
exported_region export_region(const buffer& b, access a, size_t offset = 0, size_t len = size_t(-1));

} // namespace shoal::net::rdma
