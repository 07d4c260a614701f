// rwlock: shared readers, an exclusive writer, FIFO fairness, try/timeout/abort locks, holders
// and with_lock.
#include "core/future_util.hh"
#include "core/rwlock.hh"
#include "core/timer.hh"
#include "queued_tasks.hh"
#include "support/run.hh"
#include "test_failures.hh"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using namespace std::chrono_literals;
using shoal::testing::failure_message;
using shoal::testing::failure_of;
using shoal::testing::run_in_shard;
using shoal::testing::run_queued_tasks;
using shoal::testing::test_error;

TEST(rwlock, readers_share_and_a_writer_excludes) {
    rwlock l;
    EXPECT_FALSE(l.locked());
    EXPECT_TRUE(l.try_read_lock());
    EXPECT_TRUE(l.try_read_lock());
    EXPECT_TRUE(l.locked());
    EXPECT_FALSE(l.try_write_lock());
    l.read_unlock();
    EXPECT_FALSE(l.try_write_lock());
    l.read_unlock();
    EXPECT_TRUE(l.try_write_lock());
    EXPECT_FALSE(l.try_read_lock());
    EXPECT_FALSE(l.try_write_lock());
    l.write_unlock();
    EXPECT_FALSE(l.locked());
}

TEST(rwlock, a_waiting_writer_holds_back_later_readers) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  rwlock l;
                  std::vector<std::string> order;
                  co_await l.read_lock();
                  auto writer = l.write_lock().then([&] { order.push_back("writer"); });
                  auto reader = l.read_lock().then([&] { order.push_back("reader"); });
                  EXPECT_FALSE(l.try_read_lock()); // a writer waits: no overtaking
                  co_await run_queued_tasks();
                  EXPECT_TRUE(order.empty());
                  l.read_unlock();
                  co_await std::move(writer);
                  co_await run_queued_tasks();
                  EXPECT_EQ(order, (std::vector<std::string>{"writer"}));
                  l.write_unlock();
                  co_await std::move(reader);
                  EXPECT_EQ(order, (std::vector<std::string>{"writer", "reader"}));
                  l.read_unlock();
                  EXPECT_FALSE(l.locked());
              }),
              0);
}

TEST(rwlock, lock_with_a_deadline_or_an_abort_source) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  rwlock l;
                  co_await l.write_lock();
                  auto timed = l.for_read().lock(steady_clock_type::now() + 10ms);
                  auto message = co_await failure_message(std::move(timed));
                  EXPECT_EQ(message, "semaphore wait timed out");
                  abort_source as;
                  auto abortable = l.for_write().lock(as);
                  as.request_abort_ex(test_error("gave up"));
                  message = co_await failure_message(std::move(abortable));
                  EXPECT_EQ(message, "gave up");
                  l.write_unlock();
                  EXPECT_FALSE(l.locked()); // the failed waiters took nothing
              }),
              0);
}

TEST(rwlock, holders_release_on_destruction) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  rwlock l;
                  {
                      auto r1 = co_await l.hold_read_lock();
                      auto r2 = co_await l.hold_read_lock();
                      EXPECT_FALSE(l.try_write_lock());
                  }
                  {
                      auto w = co_await l.hold_write_lock();
                      EXPECT_FALSE(l.try_read_lock());
                  }
                  EXPECT_FALSE(l.locked());
              }),
              0);
}

TEST(rwlock, with_lock_releases_whatever_the_outcome) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  rwlock l;
                  int value = co_await with_lock(l.for_read(), [&] {
                      EXPECT_FALSE(l.try_write_lock());
                      return sleep(1ms).then([] { return 5; });
                  });
                  EXPECT_EQ(value, 5);
                  EXPECT_FALSE(l.locked());
                  auto failed = with_lock(l.for_write(), []() -> future<> {
                      co_await sleep(1ms);
                      throw test_error("inside the lock");
                  });
                  auto message = co_await failure_message(std::move(failed));
                  EXPECT_EQ(message, "inside the lock");
                  EXPECT_FALSE(l.locked());
                  auto throws_at_once =
                      with_lock(l.for_write(), []() -> int { throw test_error("at once"); });
                  message = co_await failure_message(std::move(throws_at_once));
                  EXPECT_EQ(message, "at once");
                  EXPECT_FALSE(l.locked());
              }),
              0);
}

TEST(rwlock, writers_are_exclusive_under_load) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  rwlock l;
                  int readers = 0;
                  int writers = 0;
                  bool overlap = false;
                  std::vector<future<>> fs;
                  for (int i = 0; i < 30; ++i) {
                      bool write = i % 5 == 0;
                      fs.push_back(with_lock(write ? l.for_write() : l.for_read(), [&, write]() {
                          (write ? writers : readers)++;
                          overlap = overlap || writers > 1 || (writers == 1 && readers > 0);
                          return sleep(200us).then([&, write] { (write ? writers : readers)--; });
                      }));
                  }
                  co_await when_all_succeed(std::move(fs));
                  EXPECT_FALSE(overlap);
                  EXPECT_FALSE(l.locked());
              }),
              0);
}

TEST(rwlock, destroying_it_breaks_its_waiters) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto l = std::make_unique<rwlock>();
                  co_await l->write_lock();
                  auto waiting = l->read_lock();
                  l.reset();
                  auto message = co_await failure_message(std::move(waiting));
                  EXPECT_EQ(message, "semaphore broken");
              }),
              0);
}
