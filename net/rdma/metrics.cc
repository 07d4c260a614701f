#include "net/rdma/metrics.hh"

#include "net/rdma/context.hh"
#include "net/rdma/memory_pool.hh"

namespace shoal::net::rdma {

namespace {

/// Reads one number of the calling shard's context, if RDMA runs there.
template <typename Read>
metrics::reader from_context(Read read) {
    return [read]() -> std::optional<double> {
        shard_context* c = shard_context::local_or_null();
        if (!c) {
            return std::nullopt;
        }
        return double(read(*c));
    };
}

} // namespace

metrics::metric_group publish_metrics() {
    metrics::metric_group g;
    auto counter = [&g](const char* name, const char* help, auto read) {
        g.add_counter(name, help, from_context(read));
    };
    auto gauge = [&g](const char* name, const char* help, auto read) {
        g.add_gauge(name, help, from_context(read));
    };
    using ctx = shard_context&;
    counter("shoal_rdma_cq_polls_total", "Completion queue poll rounds.",
            [](ctx c) { return c.stats().cq.polls; });
    counter("shoal_rdma_completions_total", "Work completions dispatched (sends, receives, one-sided).",
            [](ctx c) { return c.stats().cq.completions; });
    counter("shoal_rdma_cq_arms_total", "ibv_req_notify_cq calls before the shard slept.",
            [](ctx c) { return c.stats().cq.arms; });
    counter("shoal_rdma_cq_events_total", "Completion-channel events: the shard was woken by a completion.",
            [](ctx c) { return c.stats().cq.cq_events; });
    counter("shoal_rdma_cq_resizes_total", "Times the completion queue grew.",
            [](ctx c) { return c.stats().cq.resizes; });
    counter("shoal_rdma_post_send_calls_total", "ibv_post_send calls (each posts a batch).",
            [](ctx c) { return c.stats().post_send_calls; });
    counter("shoal_rdma_send_requests_total", "Send work requests posted.",
            [](ctx c) { return c.stats().send_requests; });
    counter("shoal_rdma_cm_events_total", "rdma_cm events handled.",
            [](ctx c) { return c.stats().cm_events; });
    counter("shoal_rdma_async_events_total", "Device asynchronous events handled.",
            [](ctx c) { return c.stats().async_events; });
    counter("shoal_rdma_srq_limit_events_total", "SRQ limit events (the shared receive queue ran low).",
            [](ctx c) { return c.stats().srq_limit_events; });
    counter("shoal_rdma_last_wqe_timeouts_total",
            "QPs torn down after waiting in vain for their last WQE event.",
            [](ctx c) { return c.stats().last_wqe_timeouts; });
    gauge("shoal_rdma_connections", "RDMA connections alive.", [](ctx c) { return c.stats().connections; });
    gauge("shoal_rdma_srq_posted", "Receives posted in the shared receive queue.",
          [](ctx c) { return c.stats().srq_posted; });
    gauge("shoal_rdma_srq_committed", "Posted receives promised to peers as credits.",
          [](ctx c) { return c.stats().srq_committed; });
    gauge("shoal_rdma_pool_registered_bytes", "Bytes of registered memory in the shard's pool.",
          [](ctx c) { return c.pool().stats().registered_bytes; });
    gauge("shoal_rdma_pool_regions", "Registered regions of the pool.",
          [](ctx c) { return c.pool().stats().regions; });
    gauge("shoal_rdma_pool_in_use_bytes", "Capacity of the pool buffers handed out now.",
          [](ctx c) { return c.pool().stats().in_use_bytes; });
    gauge("shoal_rdma_pool_in_use_buffers", "Pool buffers handed out now.",
          [](ctx c) { return c.pool().stats().in_use_buffers; });
    gauge("shoal_rdma_pool_peak_in_use_bytes", "Highest in-use bytes the pool has seen.",
          [](ctx c) { return c.pool().stats().peak_in_use_bytes; });
    counter("shoal_rdma_pool_allocations_total", "Pool buffers handed out.",
            [](ctx c) { return c.pool().stats().allocations; });
    counter("shoal_rdma_pool_refusals_total", "Pool allocations refused (size limit or high watermark).",
            [](ctx c) { return c.pool().stats().failures; });
    counter("shoal_rdma_pool_remote_frees_total", "Pool buffers freed by another shard.",
            [](ctx c) { return c.pool().stats().remote_frees; });
    counter("shoal_rdma_pool_registrations_total", "ibv_reg_mr calls made by the pool.",
            [](ctx c) { return c.pool().stats().registrations; });
    return g;
}

} // namespace shoal::net::rdma
