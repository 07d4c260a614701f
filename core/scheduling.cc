#include "core/scheduling.hh"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <stdexcept>

namespace shoal {

constinit thread_local unsigned internal::current_scheduling_group_id = 0;

namespace {

/// The process-wide table of groups: shares are read lock-free by every reactor; names and
/// slots change under the lock.
struct group_table {
    std::mutex lock;
    std::string names[max_scheduling_groups] = {"main"};
    bool used[max_scheduling_groups] = {true};
    std::atomic<float> shares[max_scheduling_groups];

    group_table() {
        for (auto& s : shares) {
            s.store(1000.0f, std::memory_order_relaxed);
        }
    }
};

group_table& groups() {
    static group_table table;
    return table;
}

float clamp_shares(float shares) noexcept {
    return std::clamp(shares, 1.0f, 1000000.0f);
}

} // namespace

std::string scheduling_group::name() const {
    auto& t = groups();
    std::lock_guard g(t.lock);
    return t.names[_id];
}

float scheduling_group::shares() const noexcept {
    return internal::scheduling_group_shares(_id);
}

void scheduling_group::set_shares(float shares) noexcept {
    groups().shares[_id].store(clamp_shares(shares), std::memory_order_relaxed);
}

float internal::scheduling_group_shares(unsigned id) noexcept {
    return groups().shares[id].load(std::memory_order_relaxed);
}

scheduling_group create_scheduling_group(std::string name, float shares) {
    auto& t = groups();
    std::lock_guard g(t.lock);
    for (unsigned id = 1; id < max_scheduling_groups; ++id) {
        if (!t.used[id]) {
            t.used[id] = true;
            t.names[id] = std::move(name);
            t.shares[id].store(clamp_shares(shares), std::memory_order_relaxed);
            return scheduling_group(id);
        }
    }
    throw std::runtime_error("create_scheduling_group: all " + std::to_string(max_scheduling_groups) +
                             " scheduling groups are in use");
}

void destroy_scheduling_group(scheduling_group sg) noexcept {
    if (sg.is_main()) {
        return;
    }
    auto& t = groups();
    std::lock_guard g(t.lock);
    t.used[sg.id()] = false;
    t.names[sg.id()].clear();
}

scheduling_group current_scheduling_group() noexcept {
    return scheduling_group(internal::current_scheduling_group_id);
}

} // namespace shoal
