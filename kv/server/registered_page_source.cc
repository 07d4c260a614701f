#include "kv/server/registered_page_source.hh"

#include "net/rdma/memory_pool.hh"

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include <infiniband/verbs.h>
#include <sys/mman.h>

namespace shoal::kv {

registered_page_source::registered_page_source(ibv_pd* pd, size_t page_size, size_t pages, bool mw_bind)
    : _page_size((page_size + 63) & ~size_t(63))
    , _size(_page_size * pages) {
    void* p = ::mmap(nullptr, _size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        throw std::runtime_error("kv: cannot map " + std::to_string(_size) +
                                 " bytes of item memory: " + std::strerror(errno));
    }
    _base = static_cast<char*>(p);
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
    if (mw_bind) {
        access |= IBV_ACCESS_MW_BIND;
    }
    _mr = ibv_reg_mr(pd, _base, _size, access);
    if (!_mr) {
        int err = errno;
        ::munmap(_base, _size);
        throw std::runtime_error("kv: cannot register " + std::to_string(_size) + " bytes of item memory (" +
                                 std::strerror(err) + "; check `ulimit -l`)");
    }
    _rkey = _mr->rkey;
    _lkey = _mr->lkey;
    net::rdma::internal::count_registration();
    _free.reserve(pages);
}

registered_page_source::~registered_page_source() {
    ibv_dereg_mr(_mr);
    ::munmap(_base, _size);
}

char* registered_page_source::allocate_page() {
    if (!_free.empty()) {
        char* p = _free.back();
        _free.pop_back();
        return p;
    }
    if (_carved + _page_size > _size) {
        return nullptr;
    }
    char* p = _base + _carved;
    _carved += _page_size;
    return p;
}

void registered_page_source::free_page(char* page) noexcept {
    _free.push_back(page); // reserved when the page was first carved: no allocation here
}

} // namespace shoal::kv
