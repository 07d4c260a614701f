#pragma once

#include "core/future.hh"

#include <string>
#include <utility>

namespace shoal {

/// Most scheduling groups that may exist at once, the default one included.
inline constexpr unsigned max_scheduling_groups = 16;

/// A class of work with a share of the CPU (foreground requests vs background work such as
/// eviction or compaction). Every task belongs to the group that was current when it was made;
/// each shard keeps one task queue per group and, when several have tasks, runs the group that
/// has had the least CPU time per share so far, so busy groups get CPU in proportion to their
/// shares. A group with nothing queued costs nothing. Cheap to copy; valid on every shard.
class scheduling_group {
public:
    /// The default group (shares 1000), where everything runs unless told otherwise.
    constexpr scheduling_group() noexcept = default;

    /// Index of the group's queue (0 for the default group).
    unsigned id() const noexcept { return _id; }
    /// The name given at creation ("main" for the default group).
    std::string name() const;
    /// The group's shares.
    float shares() const noexcept;
    /// Changes the group's shares (at least 1); takes effect on every shard.
    void set_shares(float shares) noexcept;
    bool is_main() const noexcept { return _id == 0; }
    friend bool operator==(scheduling_group a, scheduling_group b) noexcept { return a._id == b._id; }

private:
    friend scheduling_group create_scheduling_group(std::string name, float shares);
    friend scheduling_group current_scheduling_group() noexcept;
    constexpr explicit scheduling_group(unsigned id) noexcept
        : _id(id) {}
    unsigned _id = 0;
};

/// Creates a group with `shares` (clamped to [1, 1000000]); usable on every shard at once.
/// Throws std::runtime_error when `max_scheduling_groups` exist already.
scheduling_group create_scheduling_group(std::string name, float shares);

/// Frees a group's slot for reuse. No task of it may be queued, and it may not be used again.
/// The default group is never destroyed.
void destroy_scheduling_group(scheduling_group sg) noexcept;

/// The group of the code running now.
scheduling_group current_scheduling_group() noexcept;

/// The default group.
inline scheduling_group default_scheduling_group() noexcept {
    return scheduling_group();
}

/// Runs `func()` in `sg`: every task it creates (its continuations, the coroutines it starts,
/// their resumptions) belongs to `sg`. Returns `func`'s result as a future; what the caller
/// chains on that future runs in the caller's group.
template <typename Func>
auto with_scheduling_group(scheduling_group sg, Func&& func) {
    unsigned saved = std::exchange(internal::current_scheduling_group_id, sg.id());
    auto f = futurize_invoke(std::forward<Func>(func));
    internal::current_scheduling_group_id = saved;
    return f;
}

namespace internal {
/// The shares of group `id` (read by the reactors).
float scheduling_group_shares(unsigned id) noexcept;
} // namespace internal

} // namespace shoal
