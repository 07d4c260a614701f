#pragma once

namespace shoal {

namespace internal {
/// The two words `need_preempt()` compares on a shard: the head and the tail of its preemption
/// timer's completion queue (core/preempt_timer.hh). The kernel moves the tail when the task
/// quota runs out; the reactor moves the head back level when it polls. Off a shard (or with
/// no time quota) both point at one word that never changes.
struct preempt_words {
    const unsigned* head;
    const unsigned* tail;
};
extern constinit thread_local preempt_words preempt_watch;
} // namespace internal

/// True when the running task has used up the shard's task quota (0.5 ms by default) and should
/// let the reactor poll: long loops check it and yield (`co_await yield()`); a `co_await` of a
/// ready future does so on its own. Two loads of memory the kernel shares with the shard: no
/// clock read, no system call, no other thread. Always false outside a shard.
inline bool need_preempt() noexcept {
    const internal::preempt_words& w = internal::preempt_watch;
    return __atomic_load_n(w.tail, __ATOMIC_RELAXED) != __atomic_load_n(w.head, __ATOMIC_RELAXED);
}

} // namespace shoal
