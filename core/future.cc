#include "core/future.hh"

#include "core/log.hh"

#include <atomic>

namespace shoal {

namespace {
logger future_log("future");
std::atomic<uint64_t> ignored_failures{0};
} // namespace

uint64_t ignored_failed_futures() noexcept {
    return ignored_failures.load(std::memory_order_relaxed);
}

void internal::report_ignored_failure(const std::exception_ptr& ex) noexcept {
    ignored_failures.fetch_add(1, std::memory_order_relaxed);
    try {
        future_log.warn("exceptional future ignored: {}", ex);
    } catch (...) {
        // Logging failed (no memory): the counter still records it.
    }
}

} // namespace shoal
