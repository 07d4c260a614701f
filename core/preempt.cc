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
    s.checked_at = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                       .count();
    s.raised = s.checked_at >= s.deadline;
    return s.raised;
}

} // namespace shoal::internal
