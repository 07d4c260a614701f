#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include <infiniband/verbs.h>

namespace shoal::net::rdma {

class buffer;

/// What a peer may do to exported memory (combine with |).
enum class access : unsigned {
    none = 0,
    remote_read = 1,
    remote_write = 2,
    remote_atomic = 4,
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

/// Registered local memory a one-sided operation reads from or writes into.
struct local_span {
    char* addr = nullptr;
    uint32_t length = 0;
    uint32_t lkey = 0;
};

/// A span of `len` bytes at `offset` of a pool buffer (checked against its capacity).
local_span span_of(const buffer& b, size_t offset, size_t len);

/// User memory registered with the calling shard's protection domain (RAII: deregistered when
/// destroyed). Use it as the local side of one-sided operations, or export it.
class memory_region {
public:
    memory_region() noexcept = default;
    memory_region(memory_region&& o) noexcept
        : _mr(std::exchange(o._mr, nullptr))
        , _shard(o._shard) {}
    memory_region& operator=(memory_region&& o) noexcept;
    memory_region(const memory_region&) = delete;
    memory_region& operator=(const memory_region&) = delete;
    ~memory_region() { deregister(); }

    /// Start of the registered memory.
    char* data() const noexcept { return static_cast<char*>(_mr->addr); }
    /// Registered length in bytes.
    size_t size() const noexcept { return _mr->length; }
    /// The local key (what a local_span carries).
    uint32_t lkey() const noexcept { return _mr->lkey; }
    /// The remote key a peer uses (works only for the rights granted).
    uint32_t rkey() const noexcept { return _mr->rkey; }
    /// True while registered.
    explicit operator bool() const noexcept { return _mr != nullptr; }
    /// `len` bytes at `offset`; throws std::out_of_range past the end.
    local_span span(size_t offset, size_t len) const;
    /// The whole region as peers address it.
    remote_region remote() const noexcept {
        return {reinterpret_cast<uintptr_t>(_mr->addr), _mr->rkey, _mr->length};
    }
    /// Deregisters now: the keys stop working (remote accesses fail from then on).
    void deregister() noexcept;

private:
    friend memory_region register_memory(void* addr, size_t len, access a);
    ibv_mr* _mr = nullptr;
    unsigned _shard = 0;
};

/// Registers [addr, addr + len) on the calling shard for local use and the remote access `a`.
/// Throws rdma_error (with the memlock limit) when registration fails. Not for the data path:
/// each call is an ibv_reg_mr.
memory_region register_memory(void* addr, size_t len, access a = access::none);

/// Memory exported to peers: a registration of exactly the exported range with exactly the
/// granted access, so a peer can reach nothing else. `revoke()` (or destruction) deregisters
/// it; later accesses with its rkey fail on the peer with a remote access error.
class exported_region {
public:
    exported_region() noexcept = default;
    /// Exports the registration `mr` as it is.
    explicit exported_region(memory_region mr) noexcept
        : _mr(std::move(mr)) {}
    /// What to hand to the peer.
    remote_region descriptor() const noexcept { return _mr.remote(); }
    /// The local view of the same memory.
    local_span span(size_t offset, size_t len) const { return _mr.span(offset, len); }
    /// Start of the exported memory.
    char* data() const noexcept { return _mr.data(); }
    /// Exported length in bytes.
    size_t size() const noexcept { return _mr.size(); }
    /// Deregisters now: the peer's later accesses fail.
    void revoke() noexcept { _mr.deregister(); }
    /// True once revoked (also for a default-constructed one).
    bool revoked() const noexcept { return !_mr; }

private:
    memory_region _mr;
};

/// Exports [addr, addr + len) of any memory with access `a` (at least one remote right).
exported_region export_region(void* addr, size_t len, access a);
/// Exports `len` bytes at `offset` of a pool buffer (the whole buffer by default).
exported_region export_region(const buffer& b, access a, size_t offset = 0, size_t len = size_t(-1));

} // namespace shoal::net::rdma
