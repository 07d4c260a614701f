// The accessors of a memory region: they read the verbs registration, whose type only this file
// and the others that call verbs see (memory_region.hh stays free of <infiniband/verbs.h>).
#include "net/rdma/memory_region.hh"

#include <infiniband/verbs.h>

namespace shoal::net::rdma {

char* memory_region::data() const noexcept {
    return static_cast<char*>(_mr->addr);
}

size_t memory_region::size() const noexcept {
    return _mr->length;
}

uint32_t memory_region::lkey() const noexcept {
    return _mr->lkey;
}

uint32_t memory_region::rkey() const noexcept {
    return _mr->rkey;
}

remote_region memory_region::remote() const noexcept {
    return {reinterpret_cast<uintptr_t>(_mr->addr), _mr->rkey, _mr->length};
}

} // namespace shoal::net::rdma
