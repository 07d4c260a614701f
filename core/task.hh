#pragma once

namespace shoal {

namespace internal {
/// The scheduling group (core/scheduling.hh) of the code running on this thread: the group of
/// the running task, or the one `with_scheduling_group` entered. Tasks created now belong to it.
extern constinit thread_local unsigned current_scheduling_group_id;
} // namespace internal

/// A unit of work the reactor runs. Tasks are linked intrusively into the reactor's queue, so
/// scheduling one never allocates. `run_and_dispose` runs it and releases whatever it owns (a
/// continuation deletes itself; a coroutine or fiber resumes and owns its own lifetime).
class task {
public:
    /// Runs the task; after it returns the reactor never touches the task again.
    virtual void run_and_dispose() noexcept = 0;

    /// The scheduling group whose queue this task goes to: the one current when it was made.
    unsigned scheduling_group_id() const noexcept { return _sg; }

protected:
    ~task() = default;

private:
    friend class task_queue;
    task* _next = nullptr;
    unsigned _sg = internal::current_scheduling_group_id;
};

/// An intrusive FIFO of tasks: push and pop are O(1) and never allocate.
class task_queue {
public:
    /// Appends `t` at the tail.
    void push_back(task* t) noexcept {
        t->_next = nullptr;
        if (_tail) {
            _tail->_next = t;
        } else {
            _head = t;
        }
        _tail = t;
        ++_size;
    }
    /// Removes and returns the head; the queue must not be empty.
    task* pop_front() noexcept {
        task* t = _head;
        _head = t->_next;
        if (!_head) {
            _tail = nullptr;
        }
        --_size;
        return t;
    }
    bool empty() const noexcept { return _head == nullptr; }
    unsigned long size() const noexcept { return _size; }

private:
    task* _head = nullptr;
    task* _tail = nullptr;
    unsigned long _size = 0;
};

/// Queues `t` on the current shard's reactor. Must be called on a reactor thread.
void schedule(task* t) noexcept;

} // namespace shoal
