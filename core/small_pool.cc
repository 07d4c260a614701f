#include "core/small_pool.hh"

namespace shoal::internal {

constinit thread_local small_pool::lists small_pool::tl_lists{};

namespace {
/// Returns a thread's cached objects to malloc when the thread exits.
struct pool_cleanup {
    ~pool_cleanup() { small_pool::release_cached(); }
};
} // namespace

void small_pool::register_cleanup() noexcept {
    // A function-local thread_local: constructed (and its destructor registered) on first use,
    // so the hot paths touch only the trivially destructible lists.
    static thread_local pool_cleanup cleanup;
    (void)cleanup;
    tl_lists.cleanup_registered = true;
}

void small_pool::release_cached() noexcept {
    lists& l = tl_lists;
    for (unsigned c = 0; c < classes; ++c) {
        while (node* n = l.head[c]) {
            l.head[c] = n->next;
            ::operator delete(n);
        }
        l.count[c] = 0;
    }
}

} // namespace shoal::internal
