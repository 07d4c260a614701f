#include "core/reactor_metrics.hh"

#include "core/reactor.hh"
#include "core/smp.hh"

#include <string>

namespace shoal {

namespace {

constexpr metrics::stats_field<reactor_stats> counters[] = {
    {"shoal_reactor_loops_total", "Reactor loop iterations.", &reactor_stats::loops},
    {"shoal_reactor_tasks_total", "Tasks the reactor ran.", &reactor_stats::tasks_run},
    {"shoal_reactor_sleeps_total", "Times the reactor slept in io_uring (idle).", &reactor_stats::sleeps},
    {"shoal_reactor_aborted_sleeps_total", "Sleeps given up because a poller had work while arming.",
     &reactor_stats::aborted_sleeps},
    {"shoal_reactor_timers_fired_total", "Timer expirations handled.", &reactor_stats::timers_fired},
    {"shoal_reactor_preemptions_total",
     "Task rounds cut short by the time quota (tasks that ran long enough to be preempted).",
     &reactor_stats::preemptions},
    {"shoal_reactor_long_tasks_total",
     "Tasks that ran longer than a task-quota period (two preemption ticks during one task).",
     &reactor_stats::long_tasks},
    {"shoal_io_uring_cq_overflow_flushes_total",
     "Times the kernel held completions back because the CQ ring was full (IORING_SQ_CQ_OVERFLOW).",
     &reactor_stats::cq_overflow_flushes},
    {"shoal_io_uring_sqes_submitted_total", "Submission queue entries handed to the kernel.",
     &reactor_stats::io_submitted},
    {"shoal_io_uring_cqes_total", "Completion queue entries processed.", &reactor_stats::io_completed},
    {"shoal_io_uring_enters_total", "io_uring_enter system calls made to submit or reap.",
     &reactor_stats::io_enter_calls},
};

/// One series per peer shard of a number read from `smp_stats(peer)`.
template <typename Read>
void per_peer(metrics::metric_group& g, bool is_counter, const char* name, const char* help, Read read) {
    for (unsigned peer = 0; peer < shard_count(); ++peer) {
        if (peer == this_shard_id()) {
            continue;
        }
        metrics::reader r = [peer, read]() -> std::optional<double> { return double(read(smp_stats(peer))); };
        metrics::labels l{{"peer", std::to_string(peer)}};
        if (is_counter) {
            g.add_counter(name, help, std::move(r), std::move(l));
        } else {
            g.add_gauge(name, help, std::move(r), std::move(l));
        }
    }
}

/// The cross-shard queues of the calling shard, one series per peer shard.
void publish_smp_metrics(metrics::metric_group& g) {
    using st = const smp_queue_stats&;
    per_peer(g, true, "shoal_smp_calls_sent_total", "Cross-shard calls this shard submitted to the peer.",
             [](st s) { return s.calls_sent; });
    per_peer(g, true, "shoal_smp_calls_received_total", "Cross-shard calls from the peer this shard ran.",
             [](st s) { return s.calls_received; });
    per_peer(g, false, "shoal_smp_calls_in_flight", "Calls to the peer submitted and not yet completed.",
             [](st s) { return s.in_flight; });
    per_peer(g, false, "shoal_smp_calls_waiting",
             "Calls to the peer waiting for a place (over the in-flight bound of 256).",
             [](st s) { return s.waiting; });
    per_peer(g, false, "shoal_smp_backlog",
             "Requests and replies for the peer held locally, not yet published to its rings.",
             [](st s) { return s.backlog; });
}

} // namespace

metrics::metric_group publish_reactor_metrics() {
    metrics::metric_group g;
    metrics::add_stats_counters(
        g, counters, +[]() -> const reactor_stats& { return local_reactor().stats(); });
    g.add_gauge("shoal_io_uring_in_flight", "I/O requests the kernel has not completed yet.",
                []() -> std::optional<double> { return double(local_reactor().io_in_flight()); });
    g.add_counter("shoal_io_uring_cq_dropped_total",
                  "Completions the kernel dropped for lack of CQ room (the ring's overflow counter).",
                  []() -> std::optional<double> { return double(local_reactor().cq_dropped()); });
    publish_smp_metrics(g);
    return g;
}

} // namespace shoal
