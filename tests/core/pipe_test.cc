// pipe: items in order, back-pressure, end of stream when the writer goes, broken pipe when the
// reader goes. `shoal::pipe` is spelled out: the POSIX `pipe` function is in scope too.
#include "core/future_util.hh"
#include "core/pipe.hh"
#include "support/run.hh"
#include "test_failures.hh"

#include <memory>
#include <optional>
#include <string>

#include <gtest/gtest.h>

using namespace shoal;
using shoal::testing::failure_message;
using shoal::testing::failure_of;
using shoal::testing::run_in_shard;

TEST(pipe, items_arrive_in_order_then_the_end_of_stream) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  shoal::pipe<std::string> p(2);
                  auto reader = std::move(p.reader);
                  {
                      auto writer = std::move(p.writer);
                      co_await writer.write("a");
                      co_await writer.write("b");
                      auto third = writer.write("c"); // full: waits for the reader
                      EXPECT_FALSE(third.available());
                      EXPECT_EQ(co_await reader.read(), std::optional<std::string>("a"));
                      co_await std::move(third);
                  } // the writer goes with two items unread
                  EXPECT_EQ(co_await reader.read(), std::optional<std::string>("b"));
                  EXPECT_EQ(co_await reader.read(), std::optional<std::string>("c"));
                  EXPECT_EQ(co_await reader.read(), std::nullopt);
                  EXPECT_EQ(co_await reader.read(), std::nullopt); // and stays at the end
              }),
              0);
}

TEST(pipe, a_pending_read_sees_the_end_of_stream) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  shoal::pipe<int> p(1);
                  auto r = p.reader.read();
                  co_await yield();
                  EXPECT_FALSE(r.available());
                  { auto gone = std::move(p.writer); }
                  EXPECT_EQ(co_await std::move(r), std::nullopt);
              }),
              0);
}

TEST(pipe, the_reader_going_breaks_the_writer) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  shoal::pipe<int> p(1);
                  auto writer = std::move(p.writer);
                  co_await writer.write(1);
                  auto pending = writer.write(2);
                  { auto gone = std::move(p.reader); }
                  auto failure = co_await failure_message(std::move(pending));
                  EXPECT_EQ(failure, "broken pipe");
                  auto later = writer.write(3);
                  EXPECT_EQ(failure_of(later), "broken pipe");
              }),
              0);
}

TEST(pipe, ends_moved_around_and_dropped_in_any_order) {
    auto r = std::make_unique<shoal::pipe<int>>(4);
    auto reader = std::move(r->reader);
    auto writer = std::move(r->writer);
    r.reset(); // the pipe object itself holds nothing
    auto other = std::move(reader);
    reader = std::move(other);
    { auto w = std::move(writer); }
    { auto rd = std::move(reader); } // the last end frees the buffer (checked by the sanitizers)
}

TEST(pipe, a_producer_and_a_consumer_coroutine) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  shoal::pipe<int> p(3);
                  auto producer = [](pipe_writer<int> w) -> future<> {
                      for (int i = 1; i <= 50; ++i) {
                          co_await w.write(int(i));
                      }
                  };
                  auto consumer = [](pipe_reader<int> r) -> future<int> {
                      int sum = 0;
                      while (auto v = co_await r.read()) {
                          sum += *v;
                      }
                      co_return sum;
                  };
                  auto sum = consumer(std::move(p.reader));
                  co_await producer(std::move(p.writer));
                  EXPECT_EQ(co_await std::move(sum), 1275);
              }),
              0);
}
