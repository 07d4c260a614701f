#include "net/rdma/metrics.hh"

#include "net/rdma/context.hh"
#include "net/rdma/memory_pool.hh"

#include <string>

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

/// The opcodes a completion series is published for, by label.
struct opcode_name {
    const char* label;
    ibv_wc_opcode op;
};
constexpr opcode_name opcodes[] = {
    {"send", IBV_WC_SEND},
    {"rdma_write", IBV_WC_RDMA_WRITE},
    {"rdma_read", IBV_WC_RDMA_READ},
    {"comp_swap", IBV_WC_COMP_SWAP},
    {"fetch_add", IBV_WC_FETCH_ADD},
    {"bind_mw", IBV_WC_BIND_MW},
    {"local_inv", IBV_WC_LOCAL_INV},
    {"recv", IBV_WC_RECV},
    {"recv_rdma_with_imm", IBV_WC_RECV_RDMA_WITH_IMM},
};

/// Label of each failed `ibv_wc_status`, from IBV_WC_LOC_LEN_ERR (index 0) on.
constexpr const char* error_names[] = {
    "loc_len_err",   "loc_qp_op_err", "loc_eec_op_err",     "loc_prot_err",     "wr_flush_err",
    "mw_bind_err",   "bad_resp_err",  "loc_access_err",     "rem_inv_req_err",  "rem_access_err",
    "rem_op_err",    "retry_exc_err", "rnr_retry_exc_err",  "loc_rdd_viol_err", "rem_inv_rd_req_err",
    "rem_abort_err", "inv_eecn_err",  "inv_eec_state_err",  "fatal_err",        "resp_timeout_err",
    "general_err",   "tm_err",        "tm_rndv_incomplete",
};
static_assert(std::size(error_names) == IBV_WC_TM_RNDV_INCOMPLETE);

/// Completions by opcode, errors by status, per-class pool bytes and SRQ receives.
void publish_labelled(metrics::metric_group& g) {
    for (const auto& o : opcodes) {
        unsigned slot = internal::wc_counts::opcode_index(unsigned(o.op));
        g.add_counter(
            "shoal_rdma_completions_by_opcode_total",
            "Successful work completions by opcode (receives and the sender's own requests).",
            from_context([slot](shard_context& c) { return c.completion_counts().by_opcode[slot]; }),
            {{"opcode", o.label}});
    }
    for (unsigned st = IBV_WC_LOC_LEN_ERR; st <= IBV_WC_TM_RNDV_INCOMPLETE; ++st) {
        g.add_counter(
            "shoal_rdma_completion_errors_total",
            "Failed work completions by status (wr_flush_err: requests flushed from a QP in error).",
            from_context([st](shard_context& c) { return c.completion_counts().by_status[st]; }),
            {{"status", error_names[st - 1]}});
    }
    // One series per size class of the pool (powers of two; sizes it does not use leave none).
    for (size_t size = 64; size <= (size_t(64) << 20); size <<= 1) {
        g.add_gauge("shoal_rdma_pool_class_in_use_bytes",
                    "Bytes of the pool's buffers of this size class handed out now.",
                    [size]() -> std::optional<double> {
                        shard_context* c = shard_context::local_or_null();
                        if (!c) {
                            return std::nullopt;
                        }
                        memory_pool& p = c->pool();
                        for (size_t i = 0; i < p.class_count(); ++i) {
                            if (p.class_size(i) == size) {
                                return double(p.class_in_use_buffers(i) * size);
                            }
                        }
                        return std::nullopt;
                    },
                    {{"class", std::to_string(size)}});
    }
    // One series per receive size class (a power of two; the default class's size when it is
    // not one is only in the totals): receives posted and promised in its SRQ.
    for (size_t size = min_receive_class; size <= (size_t(64) << 20); size <<= 1) {
        auto of_class = [size](bool committed) -> metrics::reader {
            return [size, committed]() -> std::optional<double> {
                shard_context* c = shard_context::local_or_null();
                if (!c) {
                    return std::nullopt;
                }
                for (const auto& q : c->receive_queues()) {
                    if (q->buffer_size() == size) {
                        return double(committed ? q->committed() : q->posted());
                    }
                }
                return std::nullopt;
            };
        };
        g.add_gauge("shoal_rdma_srq_class_posted", "Receives posted in the SRQ of this receive size class.",
                    of_class(false), {{"class", std::to_string(size)}});
        g.add_gauge("shoal_rdma_srq_class_committed",
                    "Posted receives of this receive size class promised to peers as credits.",
                    of_class(true), {{"class", std::to_string(size)}});
    }
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
    gauge("shoal_rdma_srq_posted", "Receives posted in the shared receive queues (all size classes).",
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
    counter("shoal_rdma_pool_watermark_refusals_total",
            "Optional allocations (receive windows of new connections) refused above the high watermark.",
            [](ctx c) { return c.pool().stats().watermark_refusals; });
    counter("shoal_rdma_credit_stalls_total",
            "Times a connection stopped sending to wait for the peer's receive credits.",
            [](ctx c) { return c.stats().credit_stalls; });
    counter("shoal_rdma_pool_remote_frees_total", "Pool buffers freed by another shard.",
            [](ctx c) { return c.pool().stats().remote_frees; });
    counter("shoal_rdma_pool_registrations_total", "ibv_reg_mr calls made by the pool.",
            [](ctx c) { return c.pool().stats().registrations; });
    publish_labelled(g);
    return g;
}

} // namespace shoal::net::rdma
