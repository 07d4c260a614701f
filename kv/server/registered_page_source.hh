#pragma once

#include "kv/store/page_source.hh"

#include <cstddef>
#include <cstdint>
#include <vector>

struct ibv_mr; // <infiniband/verbs.h> stays out of kv's headers: the .cc calls verbs
struct ibv_pd;

namespace shoal::kv {

/// Pages carved from one region of memory registered once for RDMA (native KV protocol): every
/// item a store keeps in them is remotely readable with one rkey, with no registration per item
/// or per page. Remote READ only; remote writes go through per-grant windows or registrations
/// (`rdma_server`, kv/server/rdma_server.hh). The region is reserved and registered (pinned)
/// whole when the source is made: `pages` × `page_size` bytes. Used on the shard that made it.
class registered_page_source final : public page_source {
public:
    /// Registers `pages` pages of `page_size` bytes on `pd`; `mw_bind` also allows memory
    /// windows to be bound on it. Throws std::runtime_error (with errno's text) on failure.
    registered_page_source(ibv_pd* pd, size_t page_size, size_t pages, bool mw_bind);
    ~registered_page_source() override;
    registered_page_source(const registered_page_source&) = delete;
    registered_page_source& operator=(const registered_page_source&) = delete;

    char* allocate_page() override;
    void free_page(char* page) noexcept override;
    size_t page_size() const noexcept override { return _page_size; }

    /// The key remote readers use for every page.
    uint32_t rkey() const noexcept { return _rkey; }
    /// The local key (for one-sided operations from this memory).
    uint32_t lkey() const noexcept { return _lkey; }
    /// The registration (memory windows are bound on it).
    ibv_mr* mr() const noexcept { return _mr; }
    /// Start of the region.
    char* base() const noexcept { return _base; }
    /// Bytes of the region.
    size_t size() const noexcept { return _size; }
    /// Whether [p, p + len) lies inside the region.
    bool contains(const void* p, size_t len) const noexcept {
        auto a = static_cast<const char*>(p);
        return a >= _base && len <= _size && a - _base <= ptrdiff_t(_size - len);
    }

private:
    size_t _page_size;
    size_t _size;
    char* _base = nullptr;
    ibv_mr* _mr = nullptr;
    uint32_t _rkey = 0; // the registration's keys, kept here so the accessors need no verbs type
    uint32_t _lkey = 0;
    size_t _carved = 0;
    std::vector<char*> _free;
};

} // namespace shoal::kv
