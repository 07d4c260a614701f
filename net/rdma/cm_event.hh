#pragma once

#include <array>
#include <cstdint>
#include <span>

#include <rdma/rdma_cma.h>

namespace shoal::net::rdma::internal {

/// A copy of an rdma_cm event, taken before the event is acknowledged (so handlers may destroy
/// ids freely: acknowledging first is what keeps rdma_destroy_id from blocking).
struct cm_event {
    rdma_cm_event_type type{};
    int status = 0;
    rdma_cm_id* id = nullptr;
    rdma_cm_id* listen_id = nullptr;
    uint8_t responder_resources = 0;
    uint8_t initiator_depth = 0;
    uint8_t private_data_len = 0;
    std::array<uint8_t, 255> private_data{};

    /// The private data the event carried (empty if none).
    std::span<const uint8_t> pdata() const noexcept { return {private_data.data(), private_data_len}; }
};

/// Whatever an rdma_cm id's `context` points to: a connecting or established connection, or a
/// listener (which receives the connect requests of its id).
class cm_handler {
public:
    /// Handles one event of the id, on the shard whose event channel delivered it.
    virtual void on_cm_event(const cm_event& ev) noexcept = 0;

protected:
    ~cm_handler() = default;
};

} // namespace shoal::net::rdma::internal
