#include "core/reactor_metrics.hh"

#include "core/reactor.hh"

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
    {"shoal_io_uring_sqes_submitted_total", "Submission queue entries handed to the kernel.",
     &reactor_stats::io_submitted},
    {"shoal_io_uring_cqes_total", "Completion queue entries processed.", &reactor_stats::io_completed},
    {"shoal_io_uring_enters_total", "io_uring_enter system calls made to submit or reap.",
     &reactor_stats::io_enter_calls},
};

} // namespace

metrics::metric_group publish_reactor_metrics() {
    metrics::metric_group g;
    metrics::add_stats_counters(
        g, counters, +[]() -> const reactor_stats& { return local_reactor().stats(); });
    g.add_gauge("shoal_io_uring_in_flight", "I/O requests the kernel has not completed yet.",
                []() -> std::optional<double> { return double(local_reactor().io_in_flight()); });
    return g;
}

} // namespace shoal
