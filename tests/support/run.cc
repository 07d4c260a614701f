#include "support/run.hh"

#include "core/log.hh"

#include <atomic>
#include <cstdint>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace shoal::testing {

namespace {
/// Drops declared for the run in progress (or the next one); reset when a run ends.
std::atomic<uint64_t> expected_drops{0};
} // namespace

void expect_dropped_futures(unsigned count) noexcept {
    expected_drops.fetch_add(count, std::memory_order_relaxed);
}

int run_in_shards(unsigned smp, std::function<future<>()> body, reactor_config cfg) {
    smp_options opts;
    opts.smp = smp;
    opts.pin = false;
    opts.reactor = cfg;
    uint64_t dropped_before = ignored_failed_futures();
    int rc = run_shards(opts, [body = std::move(body)]() -> future<int> {
        return futurize_invoke(body).then_wrapped([](future<> f) {
            if (f.failed()) {
                ADD_FAILURE() << "test body failed: " << fmt::format("{}", f.get_exception());
                return 1;
            }
            return 0;
        });
    });
    uint64_t dropped = ignored_failed_futures() - dropped_before;
    uint64_t expected = expected_drops.exchange(0, std::memory_order_relaxed);
    if (dropped != expected) {
        ADD_FAILURE()
            << dropped << " failed futures were dropped without being looked at, " << expected
            << " expected (expect_dropped_futures); each is logged as \"exceptional future ignored\"";
        return rc ? rc : 1;
    }
    return rc;
}

int run_in_shard(std::function<future<>()> body, reactor_config cfg) {
    return run_in_shards(1, std::move(body), cfg);
}

} // namespace shoal::testing
