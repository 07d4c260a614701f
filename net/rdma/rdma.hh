#pragma once

// shoal's RDMA layer. Start it once the engine runs (`rdma::start`), then on any shard:
//   - streams shaped like TCP's: rdma::listen / rdma::connect (net::server_socket /
//     net::connected_socket over SEND/RECV with credits);
//   - connections with one-sided operations: rdma::listen_rc / rdma::connect_rc, regions
//     exported with rdma::export_region, registered memory from the shard's pool;
//   - ring channels: messages written with one-sided RDMA into a ring in the receiver's memory
//     (rdma::ring_consumer / rdma::ring_producer, ring_channel.hh), many producers into one
//     consumer (rdma::ring_fan_in, ring_fan_in.hh);
//   - seed 003's remote memory pool over a peer's connection groups (rdma::remote_pool_server /
//     rdma::remote_pool_client / rdma::peer, remote_pool.hh, peer.hh);
//   - the NIC-local CPU set: nic_local.hh.
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
#include "net/rdma/peer.hh"
#include "net/rdma/remote_pool.hh"
#include "net/rdma/ring_channel.hh"
#include "net/rdma/ring_fan_in.hh"
