// queue: bounded push/pop, waiting producers and consumers in order, not_empty/not_full, abort.
#include "core/future_util.hh"
#include "core/queue.hh"
#include "queued_tasks.hh"
#include "support/run.hh"
#include "test_failures.hh"

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using shoal::testing::failure_message;
using shoal::testing::failure_of;
using shoal::testing::run_in_shard;
using shoal::testing::run_queued_tasks;
using shoal::testing::test_error;

TEST(queue, push_and_pop_without_waiting) {
    queue<std::unique_ptr<int>> q(2);
    EXPECT_TRUE(q.empty());
    EXPECT_FALSE(q.pop());
    EXPECT_TRUE(q.push(std::make_unique<int>(1)));
    EXPECT_TRUE(q.push(std::make_unique<int>(2)));
    EXPECT_TRUE(q.full());
    auto third = std::make_unique<int>(3);
    EXPECT_FALSE(q.push(std::move(third)));
    ASSERT_TRUE(third); // a refused item stays with the caller
    EXPECT_EQ(q.size(), 2u);
    EXPECT_EQ(**q.pop(), 1);
    EXPECT_TRUE(q.push(std::move(third)));
    EXPECT_EQ(**q.pop(), 2);
    EXPECT_EQ(**q.pop(), 3);
    EXPECT_FALSE(q.pop());
    EXPECT_EQ(q.max_size(), 2u);
}

TEST(queue, waiting_consumers_get_items_in_order) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  queue<int> q(4);
                  auto a = q.pop_eventually();
                  auto b = q.pop_eventually();
                  co_await run_queued_tasks();
                  EXPECT_FALSE(a.available());
                  EXPECT_TRUE(q.push(10)); // straight to the oldest consumer
                  EXPECT_TRUE(q.empty());
                  EXPECT_TRUE(q.push(20));
                  EXPECT_EQ(co_await std::move(a), 10);
                  EXPECT_EQ(co_await std::move(b), 20);
                  EXPECT_TRUE(q.push(30));
                  auto ready = q.pop_eventually();
                  EXPECT_TRUE(ready.available());
                  EXPECT_EQ(co_await std::move(ready), 30);
              }),
              0);
}

TEST(queue, waiting_producers_get_in_as_room_is_made) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  queue<int> q(1);
                  co_await q.push_eventually(1); // room: at once
                  auto p2 = q.push_eventually(2);
                  auto p3 = q.push_eventually(3);
                  EXPECT_FALSE(p2.available());
                  EXPECT_FALSE(q.push(9)); // full, and producers wait before it
                  EXPECT_EQ(*q.pop(), 1);  // lets 2 in
                  co_await std::move(p2);
                  EXPECT_FALSE(p3.available());
                  EXPECT_EQ(co_await q.pop_eventually(), 2); // lets 3 in
                  co_await std::move(p3);
                  EXPECT_EQ(*q.pop(), 3);
                  EXPECT_TRUE(q.empty());
              }),
              0);
}

TEST(queue, not_empty_and_not_full) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  queue<int> q(1);
                  co_await q.not_full(); // ready: room
                  auto has_item = q.not_empty();
                  auto has_item_too = q.not_empty(); // several waiters are allowed
                  co_await run_queued_tasks();
                  EXPECT_FALSE(has_item.available());
                  EXPECT_TRUE(q.push(1));
                  co_await std::move(has_item);
                  co_await std::move(has_item_too);
                  co_await q.not_empty(); // ready: holds an item
                  auto has_room = q.not_full();
                  co_await run_queued_tasks();
                  EXPECT_FALSE(has_room.available());
                  EXPECT_EQ(*q.pop(), 1);
                  co_await std::move(has_room);
              }),
              0);
}

TEST(queue, abort_fails_waiters_and_later_operations) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  queue<int> consumers(1);
                  auto pop = consumers.pop_eventually();
                  auto ne = consumers.not_empty();
                  consumers.abort(std::make_exception_ptr(test_error("consumers gone")));
                  auto pop_failure = co_await failure_message(std::move(pop));
                  EXPECT_EQ(pop_failure, "consumers gone");
                  auto ne_failure = co_await failure_message(std::move(ne));
                  EXPECT_EQ(ne_failure, "consumers gone");

                  queue<int> producers(1);
                  EXPECT_TRUE(producers.push(1));
                  auto push = producers.push_eventually(2);
                  auto nf = producers.not_full();
                  producers.abort(std::make_exception_ptr(test_error("producers gone")));
                  producers.abort(std::make_exception_ptr(test_error("ignored"))); // the first counts
                  EXPECT_TRUE(producers.aborted());
                  EXPECT_TRUE(producers.empty()); // items dropped
                  auto push_failure = co_await failure_message(std::move(push));
                  EXPECT_EQ(push_failure, "producers gone");
                  auto nf_failure = co_await failure_message(std::move(nf));
                  EXPECT_EQ(nf_failure, "producers gone");

                  auto later_push = producers.push_eventually(3);
                  EXPECT_EQ(failure_of(later_push), "producers gone");
                  auto later_pop = producers.pop_eventually();
                  EXPECT_EQ(failure_of(later_pop), "producers gone");
                  auto later_nf = producers.not_full();
                  EXPECT_EQ(failure_of(later_nf), "producers gone");
                  EXPECT_THROW(producers.push(4), test_error);
                  EXPECT_THROW(producers.pop(), test_error);
              }),
              0);
}

TEST(queue, destroying_it_breaks_its_waiters) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto q = std::make_unique<queue<int>>(1);
                  auto pop = q->pop_eventually();
                  auto ne = q->not_empty();
                  q.reset();
                  auto pop_failure = co_await failure_message(std::move(pop));
                  EXPECT_EQ(pop_failure, "queue broken");
                  auto ne_failure = co_await failure_message(std::move(ne));
                  EXPECT_EQ(ne_failure, "queue broken");
              }),
              0);
}

TEST(queue, a_bounded_stream_between_coroutines) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  queue<int> q(3);
                  auto producer = [](queue<int>& q) -> future<> {
                      for (int i = 1; i <= 100; ++i) {
                          co_await q.push_eventually(int(i));
                          EXPECT_LE(q.size(), 3u);
                      }
                  };
                  auto consumer = [](queue<int>& q) -> future<std::vector<int>> {
                      std::vector<int> got;
                      while (got.size() < 100) {
                          got.push_back(co_await q.pop_eventually());
                      }
                      co_return got;
                  };
                  auto p = producer(q);
                  auto got = co_await consumer(q);
                  co_await std::move(p);
                  CO_ASSERT_TRUE(got.size() == 100u);
                  for (int i = 0; i < 100; ++i) {
                      EXPECT_EQ(got[i], i + 1);
                  }
              }),
              0);
}
