#include "net/rdma/error.hh"

#include <cstring>

namespace shoal::net::rdma::internal {

std::string errno_text(const std::string& what, int err) {
    return what + ": " + std::strerror(err) + " (errno " + std::to_string(err) + ")";
}

void throw_errno(const std::string& what, int err) {
    throw rdma_error(errno_text(what, err));
}

} // namespace shoal::net::rdma::internal
