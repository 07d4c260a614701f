#pragma once

#include <atomic>

namespace shoal {

namespace internal {
/// The preemption flag of the calling shard: raised by the engine's ticker every task-quota
/// period (`reactor_config::task_quota_time`), lowered by the reactor each time it polls. Points
/// at a flag that is never raised outside a shard.
extern constinit thread_local std::atomic<bool>* preempt_flag;
} // namespace internal

/// True when the running task has used up the shard's task quota (0.5 ms by default) and should
/// let the reactor poll: long loops check it and yield (`co_await yield()`); a `co_await` of a
/// ready future does so on its own. One load of a shard-local flag: no clock read, no system
/// call. Always false outside a shard.
inline bool need_preempt() noexcept {
    return internal::preempt_flag->load(std::memory_order_relaxed);
}

} // namespace shoal
