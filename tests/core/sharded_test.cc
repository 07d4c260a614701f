// sharded<S>: one instance per shard, built, used, stopped and destroyed on its own shard;
// invoke_on, invoke_on_all, map_reduce; failures while starting and stopping.
#include "core/future_util.hh"
#include "core/sharded.hh"
#include "core/timer.hh"
#include "support/run.hh"
#include "test_failures.hh"

#include <atomic>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

using namespace shoal;
using shoal::testing::test_error;
using namespace std::chrono_literals;
using shoal::testing::run_in_shards;

namespace {

std::atomic<int> g_live{0};
std::atomic<int> g_stopped{0};
std::atomic<int> g_wrong_shard{0};

/// A service that checks it is only touched on the shard that built it.
class service {
public:
    service(std::string name, int base)
        : _name(std::move(name))
        , _base(base)
        , _shard(this_shard_id()) {
        ++g_live;
    }
    ~service() {
        check_shard();
        --g_live;
    }
    future<> stop() {
        check_shard();
        // Asynchronous shutdown work, still on this shard.
        return sleep(1ms).then([this] {
            check_shard();
            _stopped = true;
            ++g_stopped;
        });
    }
    int value() const {
        check_shard();
        return _base + int(_shard);
    }
    const std::string& name() const { return _name; }
    void add(int n) {
        check_shard();
        _base += n;
    }
    unsigned shard() const { return _shard; }

private:
    void check_shard() const {
        if (this_shard_id() != _shard) {
            ++g_wrong_shard;
        }
    }
    std::string _name;
    int _base;
    unsigned _shard;
    bool _stopped = false;
};

/// Fails to construct on one shard.
struct fragile {
    explicit fragile(unsigned bad_shard) {
        if (this_shard_id() == bad_shard) {
            throw test_error("cannot start on shard " + std::to_string(bad_shard));
        }
        ++g_live;
    }
    ~fragile() { --g_live; }
};

/// No stop(): stop() only destroys.
struct plain {
    plain() { ++g_live; }
    ~plain() { --g_live; }
};

/// stop() fails on shard 1.
struct failing_stop {
    failing_stop() { ++g_live; }
    ~failing_stop() { --g_live; }
    future<> stop() {
        if (this_shard_id() == 1) {
            return make_exception_future<>(test_error("stop failed"));
        }
        return make_ready_future<>();
    }
};

void reset_counters() {
    g_live = 0;
    g_stopped = 0;
    g_wrong_shard = 0;
}

} // namespace

TEST(sharded, lifecycle) {
    reset_counters();
    EXPECT_EQ(run_in_shards(3,
                            []() -> future<> {
                                sharded<service> s;
                                EXPECT_FALSE(s.started());
                                co_await s.start(std::string("svc"), 100);
                                EXPECT_TRUE(s.started());
                                EXPECT_EQ(g_live.load(), 3);
                                EXPECT_EQ(s.local().shard(), 0u);
                                EXPECT_EQ(s.local().name(), "svc");
                                for (unsigned shard = 0; shard < 3; ++shard) {
                                    auto [on, value] = co_await s.invoke_on(shard, [](service& svc) {
                                        return std::pair<unsigned, int>(svc.shard(), svc.value());
                                    });
                                    EXPECT_EQ(on, shard);
                                    EXPECT_EQ(value, 100 + int(shard));
                                }
                                co_await s.stop();
                                EXPECT_FALSE(s.started());
                                EXPECT_EQ(g_stopped.load(), 3);
                                EXPECT_EQ(g_live.load(), 0);
                                co_await s.stop(); // stopping again is a no-op
                            }),
              0);
    EXPECT_EQ(g_wrong_shard.load(), 0);
}

TEST(sharded, invoke_on_all_and_map_reduce) {
    reset_counters();
    EXPECT_EQ(run_in_shards(3,
                            []() -> future<> {
                                sharded<service> s;
                                co_await s.start(std::string("m"), 0);
                                co_await s.invoke_on_all([](service& svc) { svc.add(10); });
                                // A function returning a future is waited for on each shard.
                                co_await s.invoke_on_all(
                                    [](service& svc) { return sleep(1ms).then([&svc] { svc.add(1); }); });
                                auto sum = co_await s.map_reduce([](service& svc) { return svc.value(); }, 0,
                                                                 std::plus<>());
                                EXPECT_EQ(sum, (11 + 0) + (11 + 1) + (11 + 2));
                                auto names = co_await s.map_reduce(
                                    [](service& svc) {
                                        return sleep(1ms).then(
                                            [&svc] { return svc.name() + std::to_string(svc.shard()); });
                                    },
                                    std::string(), [](std::string acc, std::string v) { return acc + v; });
                                EXPECT_EQ(names, "m0m1m2");
                                auto later = co_await s.invoke_on(2, [](service& svc) {
                                    return sleep(1ms).then([&svc] { return svc.value(); });
                                });
                                EXPECT_EQ(later, 13);
                                co_await s.stop();
                            }),
              0);
    EXPECT_EQ(g_wrong_shard.load(), 0);
    EXPECT_EQ(g_live.load(), 0);
}

TEST(sharded, start_twice_fails) {
    reset_counters();
    EXPECT_EQ(run_in_shards(2,
                            []() -> future<> {
                                sharded<plain> s;
                                co_await s.start();
                                auto again = s.start();
                                EXPECT_TRUE(again.failed());
                                EXPECT_THROW(again.get(), std::logic_error);
                                EXPECT_EQ(g_live.load(), 2);
                                co_await s.stop();
                                EXPECT_EQ(g_live.load(), 0);
                            }),
              0);
}

TEST(sharded, start_failure_destroys_what_was_built) {
    reset_counters();
    EXPECT_EQ(run_in_shards(3,
                            []() -> future<> {
                                sharded<fragile> s;
                                std::string error;
                                try {
                                    co_await s.start(1u);
                                } catch (const test_error& e) {
                                    error = e.what();
                                }
                                EXPECT_EQ(error, "cannot start on shard 1");
                                EXPECT_FALSE(s.started());
                                EXPECT_EQ(g_live.load(), 0); // shards 0 and 2 were built, then destroyed
                                // The same object can be started again once the cause is gone.
                                co_await s.start(99u);
                                EXPECT_TRUE(s.started());
                                EXPECT_EQ(g_live.load(), 3);
                                co_await s.stop();
                                EXPECT_EQ(g_live.load(), 0);
                            }),
              0);
}

TEST(sharded, failed_stop_still_destroys_every_instance) {
    reset_counters();
    EXPECT_EQ(run_in_shards(2,
                            []() -> future<> {
                                sharded<failing_stop> s;
                                co_await s.start();
                                std::string error;
                                try {
                                    co_await s.stop();
                                } catch (const test_error& e) {
                                    error = e.what();
                                }
                                EXPECT_EQ(error, "stop failed");
                                EXPECT_FALSE(s.started());
                                EXPECT_EQ(g_live.load(), 0);
                            }),
              0);
}

TEST(sharded, invoke_on_an_out_of_range_shard_fails) {
    reset_counters();
    EXPECT_EQ(run_in_shards(2,
                            []() -> future<> {
                                sharded<plain> s;
                                co_await s.start();
                                bool failed = false;
                                try {
                                    co_await s.invoke_on(5, [](plain&) { return 1; });
                                } catch (const std::out_of_range&) {
                                    failed = true;
                                }
                                EXPECT_TRUE(failed);
                                co_await s.stop();
                            }),
              0);
}
