#pragma once

namespace shoal::net::rdma::internal {

/// Aborts with a message when an RDMA resource of shard `owner` is touched from another shard.
/// Called through SHOAL_RDMA_CHECK_SHARD, which debug builds compile in and release builds out.
void check_shard(unsigned owner, const char* what) noexcept;

} // namespace shoal::net::rdma::internal

#ifndef NDEBUG
/// Debug builds: asserts that the calling shard owns the resource (RDMA resources are per shard).
#define SHOAL_RDMA_CHECK_SHARD(owner, what) ::shoal::net::rdma::internal::check_shard((owner), (what))
#else
#define SHOAL_RDMA_CHECK_SHARD(owner, what) ((void)0)
#endif
