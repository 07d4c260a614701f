#include "core/preempt.hh"

#include <chrono>

namespace shoal::internal {

constinit thread_local preempt_state preempt_watch;

bool check_preempt_deadline() noexcept {
    preempt_state& s = preempt_watch;
    s.countdown = preempt_check_interval;
    if (s.deadline == no_preempt_deadline) {
        return false;
    }
    s.raised = steady_ns(std::chrono::steady_clock::now()) >= s.deadline;
    return s.raised;
}

} // namespace shoal::internal
