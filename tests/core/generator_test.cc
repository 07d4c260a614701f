// generator: values on demand, awaiting inside the body, the end, exceptions, and destroying
// the generator between calls or while one is pending.
#include "core/generator.hh"
#include "core/timer.hh"
#include "support/run.hh"
#include "test_failures.hh"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using shoal::testing::failure_message;
using shoal::testing::failure_of;
using shoal::testing::run_in_shard;
using shoal::testing::test_error;

namespace {

/// Counts its live instances, to see the body's locals destroyed.
struct guard {
    explicit guard(int& live)
        : live(live) {
        ++live;
    }
    ~guard() { --live; }
    int& live;
};

generator<int> count_to(int n, std::vector<int>& produced) {
    for (int i = 1; i <= n; ++i) {
        produced.push_back(i);
        co_yield i;
    }
}

generator<std::string> slow_words(int& live) {
    guard g(live);
    co_yield "one";
    co_await sleep(std::chrono::milliseconds(1));
    co_yield "two";
    co_await sleep(std::chrono::milliseconds(1));
}

generator<int> fails_after_one() {
    co_yield 1;
    co_await sleep(std::chrono::milliseconds(1));
    throw test_error("generator failed");
}

} // namespace

TEST(generator, produces_values_on_demand_then_the_end) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  std::vector<int> produced;
                  auto gen = count_to(3, produced);
                  EXPECT_TRUE(produced.empty()); // the body starts at the first call
                  auto first = gen();
                  EXPECT_TRUE(first.available()); // produced without suspending
                  EXPECT_EQ(co_await std::move(first), 1);
                  EXPECT_EQ(produced, (std::vector<int>{1})); // one value at a time
                  EXPECT_EQ(co_await gen(), 2);
                  EXPECT_EQ(co_await gen(), 3);
                  EXPECT_EQ(co_await gen(), std::nullopt);
                  EXPECT_EQ(co_await gen(), std::nullopt);
              }),
              0);
}

TEST(generator, the_body_may_await_between_values) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  int live = 0;
                  auto gen = slow_words(live);
                  std::vector<std::string> words;
                  while (auto w = co_await gen()) {
                      words.push_back(*w);
                  }
                  EXPECT_EQ(words, (std::vector<std::string>{"one", "two"}));
                  EXPECT_EQ(live, 0); // the body ran to its end
              }),
              0);
}

TEST(generator, an_exception_fails_the_call_and_ends_the_stream) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto gen = fails_after_one();
                  EXPECT_EQ(co_await gen(), 1);
                  EXPECT_EQ(co_await failure_message(gen()), "generator failed");
                  EXPECT_EQ(co_await gen(), std::nullopt);
              }),
              0);
}

TEST(generator, a_second_call_while_one_is_pending_fails) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  int live = 0;
                  auto gen = slow_words(live);
                  EXPECT_EQ(co_await gen(), "one");
                  auto pending = gen(); // the body sleeps
                  EXPECT_FALSE(pending.available());
                  auto again = gen();
                  EXPECT_EQ(failure_of(again),
                            "generator called again before its previous value was produced");
                  EXPECT_EQ(co_await std::move(pending), "two");
              }),
              0);
}

TEST(generator, destroyed_between_calls_or_while_one_is_pending) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  int live = 0;
                  {
                      auto gen = slow_words(live);
                      EXPECT_EQ(co_await gen(), "one");
                      EXPECT_EQ(live, 1);
                  } // stopped at a co_yield: the frame and its locals go now
                  EXPECT_EQ(live, 0);

                  future<std::optional<std::string>> pending =
                      make_ready_future<std::optional<std::string>>();
                  {
                      auto gen = slow_words(live);
                      EXPECT_EQ(co_await gen(), "one");
                      pending = gen(); // the body sleeps
                  }
                  EXPECT_EQ(live, 1); // still running: it frees itself at its next co_yield
                  EXPECT_EQ(co_await std::move(pending), "two");
                  EXPECT_EQ(live, 0);

                  auto never_started = slow_words(live);
                  EXPECT_EQ(live, 0);
                  auto moved = std::move(never_started);
              }),
              0);
}
