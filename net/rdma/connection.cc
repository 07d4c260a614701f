// rdma::connection, the user's handle: what it forwards to its connection_impl. Its one-sided
// operations are in one_sided.cc, beside their implementation (inlined there); the stream,
// message and immediate-channel entry points are in stream.cc, message.cc and immediates.cc.
#include "net/rdma/connection.hh"

#include "net/rdma/connection_impl.hh"
#include "net/rdma/memory_window.hh"

namespace shoal::net::rdma {

future<uint32_t> connection::next_immediate() {
    return impl().next_immediate();
}

const std::optional<remote_region>& connection::peer_region() const noexcept {
    return impl().peer_region();
}

future<remote_region> connection::bind_window(memory_window& w, const ibv_mr* mr, const char* addr,
                                              size_t len, access a) {
    return impl().bind_window(w, mr, addr, len, a);
}

future<> connection::invalidate_window(memory_window& w) {
    return impl().invalidate_window(w);
}

net::socket_address connection::local_address() const noexcept {
    return impl().local_address();
}

net::socket_address connection::peer_address() const noexcept {
    return impl().peer_address();
}

const connection_stats& connection::stats() const noexcept {
    return impl().stats();
}

uint32_t connection::peer_recv_buffer_size() const noexcept {
    return impl().peer_params().recv_buffer_size;
}

bool connection::usable() const noexcept {
    return _ref && impl().usable();
}

std::exception_ptr connection::error() const noexcept {
    return impl().error();
}

} // namespace shoal::net::rdma
