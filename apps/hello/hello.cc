// shoal-hello: the README's tour of the API, built and run so it stays true.
#include "core/app.hh"
#include "core/future_util.hh"
#include "core/sharded.hh"
#include "core/thread.hh"

#include <fmt/core.h>
#include <functional>

using namespace shoal;

// One instance per shard; each shard counts on its own, no locks.
struct counter {
    long hits = 0;
    future<> stop() { return make_ready_future<>(); }
};

int main(int argc, char** argv) {
    app a("hello", "a tour of shoal");
    return a.run(argc, argv, []() -> future<int> {     // runs on shard 0
        sharded<counter> counters;
        co_await counters.start();
        // Work on every shard, then gather the results back on shard 0.
        co_await counters.invoke_on_all([](counter& c) { c.hits += this_shard_id() + 1; });
        long total = co_await counters.map_reduce([](counter& c) { return c.hits; }, 0L, std::plus<>());
        // Continuations, timers and fibers mix freely.
        co_await sleep(std::chrono::milliseconds(10)).then([] { return submit_to(0, [] { return 1; }); });
        int from_fiber = co_await async([] {
            sleep(std::chrono::milliseconds(1)).get();  // suspends the fiber, not the shard
            return 42;
        });
        fmt::print("{} shards, total {}, fiber said {}\n", shard_count(), total, from_fiber);
        co_await counters.stop();
        co_return 0;
    });
}
