#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

namespace shoal::kv {

/// Where a shard's value memory comes from, in pages of one size. The store never allocates
/// item memory any other way, so a source backed by a registered RDMA pool makes
/// every key and value remotely readable without a registration per item. Used on one shard.
class page_source {
public:
    virtual ~page_source() = default;
    /// A page of `page_size()` bytes, or nullptr when the source is exhausted.
    virtual char* allocate_page() = 0;
    /// Gives back a page `allocate_page` returned.
    virtual void free_page(char* page) noexcept = 0;
    /// The size of every page.
    virtual size_t page_size() const noexcept = 0;
};

/// Pages from the heap (64-byte aligned), as many as asked for: the store's memory limit
/// bounds them. The TCP server's source.
class heap_page_source final : public page_source {
public:
    /// Pages of `page_size` bytes.
    explicit heap_page_source(size_t page_size) noexcept
        : _page_size(page_size) {}
    char* allocate_page() override {
        return static_cast<char*>(::operator new(_page_size, std::align_val_t(64), std::nothrow));
    }
    void free_page(char* page) noexcept override { ::operator delete(page, std::align_val_t(64)); }
    size_t page_size() const noexcept override { return _page_size; }

private:
    size_t _page_size;
};

} // namespace shoal::kv
