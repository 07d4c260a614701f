#pragma once

// shoal's RDMA layer. Start it once the engine runs (`rdma::start`), then on any shard:
//   - streams shaped like TCP's: rdma::listen / rdma::connect (net::server_socket /
//     net::connected_socket over SEND/RECV with credits);
//   - connections with one-sided operations: rdma::listen_rc / rdma::connect_rc, regions
//     exported with rdma::export_region, registered memory from the shard's pool;
//   - the NIC-local CPU set: nic_local.hh.
// The services built on the transport (ring channel and fan-in, remote pool, peer) live in
// net/rdma/services/ and the shoal_rdma_services library: include their headers directly.
// See docs/rdma.md.

#include "net/rdma/connection.hh"
#include "net/rdma/context.hh"
#include "net/rdma/device.hh"
#include "net/rdma/error.hh"
#include "net/rdma/fault_injector.hh"
#include "net/rdma/memory_pool.hh"
#include "net/rdma/memory_region.hh"
#include "net/rdma/memory_window.hh"
#include "net/rdma/nic_local.hh"
#include "net/rdma/options.hh"
