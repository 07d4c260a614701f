// Stackful threads (fibers): async() results and exceptions, get() suspending the fiber and not
// the reactor across a timer and a file read, yield, and the configurable stack size.
#include "core/file.hh"
#include "core/future_util.hh"
#include "core/thread.hh"
#include "core/timer.hh"
#include "support/run.hh"
#include "support/temp_file.hh"
#include "test_failures.hh"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using shoal::testing::test_error;
using namespace std::chrono_literals;
using shoal::testing::run_in_shard;
using shoal::testing::temp_file;

namespace {

struct mapping {
    uintptr_t start = 0;
    uintptr_t end = 0;
    std::string perms;
};

/// The mappings of this process, from /proc/self/maps.
std::vector<mapping> read_maps() {
    std::vector<mapping> out;
    std::ifstream in("/proc/self/maps");
    std::string line;
    while (std::getline(in, line)) {
        mapping m;
        std::istringstream ls(line);
        std::string range;
        ls >> range >> m.perms;
        auto dash = range.find('-');
        m.start = std::stoull(range.substr(0, dash), nullptr, 16);
        m.end = std::stoull(range.substr(dash + 1), nullptr, 16);
        out.push_back(m);
    }
    return out;
}

/// Bytes of stack left below the calling frame down to the guard page, and whether that guard
/// (the mapping right below the stack) is inaccessible.
struct stack_room {
    size_t below = 0;
    bool guarded = false;
};

[[gnu::noinline]] stack_room measure_stack_room() {
    auto sp = uintptr_t(__builtin_frame_address(0));
    auto maps = read_maps();
    stack_room r;
    for (auto& m : maps) {
        if (m.start <= sp && sp < m.end) {
            r.below = sp - m.start;
            for (auto& g : maps) {
                if (g.end == m.start) {
                    r.guarded = g.perms.substr(0, 3) == "---";
                }
            }
        }
    }
    return r;
}

/// Touches `bytes` of stack so an undersized stack would fault.
[[gnu::noinline]] size_t use_stack(size_t bytes) {
    char* a = static_cast<char*>(__builtin_alloca(bytes));
    std::memset(a, 1, bytes);
    size_t sum = 0;
    for (size_t i = 0; i < bytes; i += 4096) {
        sum += size_t(a[i]);
    }
    return sum;
}

} // namespace

TEST(thread, async_returns_the_value) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  EXPECT_EQ(co_await async([] { return 6 * 7; }), 42);
                  bool ran = false;
                  co_await async([&ran] { ran = true; });
                  EXPECT_TRUE(ran);
                  // A function returning a future is waited for inside the fiber.
                  EXPECT_EQ(
                      co_await async([] { return sleep(1ms).then([] { return std::string("late"); }); }),
                      "late");
              }),
              0);
}

TEST(thread, async_does_not_run_inline) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  bool ran = false;
                  auto f = async([&ran] { ran = true; });
                  EXPECT_FALSE(ran);
                  co_await std::move(f);
                  EXPECT_TRUE(ran);
              }),
              0);
}

TEST(thread, running_in_thread) {
    EXPECT_FALSE(thread::running_in_thread());
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  EXPECT_FALSE(thread::running_in_thread());
                  EXPECT_TRUE(co_await async([] { return thread::running_in_thread(); }));
                  EXPECT_THROW(thread::yield(), std::logic_error);
              }),
              0);
}

TEST(thread, exceptions_propagate) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  bool caught = false;
                  try {
                      co_await async([]() -> int { throw test_error("in fiber"); });
                  } catch (const test_error& e) {
                      caught = std::string(e.what()) == "in fiber";
                  }
                  EXPECT_TRUE(caught);

                  // get() rethrows inside the fiber, after suspending for it.
                  auto r = co_await async([] {
                      try {
                          sleep(1ms).then([] { throw test_error("after sleep"); }).get();
                      } catch (const test_error& e) {
                          return std::string(e.what());
                      }
                      return std::string("no exception");
                  });
                  EXPECT_EQ(r, "after sleep");
              }),
              0);
}

TEST(thread, get_suspends_the_fiber_not_the_reactor_across_a_timer) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  int ticks = 0;
                  bool fiber_done = false;
                  auto start = steady_clock_type::now();
                  auto fiber = async([&] {
                      sleep(30ms).get();
                      fiber_done = true;
                      return steady_clock_type::now() - start;
                  });
                  // While the fiber is blocked in get(), the shard keeps running other work.
                  while (!fiber_done && ticks < 1000000) {
                      ++ticks;
                      co_await yield();
                  }
                  auto waited = co_await std::move(fiber);
                  EXPECT_TRUE(fiber_done);
                  EXPECT_GT(ticks, 1);
                  EXPECT_GE(waited, 30ms);
              }),
              0);
}

TEST(thread, get_across_a_file_read) {
    temp_file tf("fiber reads this", "shoal-fiber");
    EXPECT_EQ(run_in_shard([&tf]() -> future<> {
                  int ticks = 0;
                  bool done = false;
                  auto text = async([&] {
                      auto f = file::open(tf.path(), O_RDONLY).get();
                      char buf[64];
                      auto pending = f.read(0, buf, sizeof(buf));
                      EXPECT_FALSE(pending.available());
                      size_t n = pending.get();
                      f.close().get();
                      done = true;
                      return std::string(buf, n);
                  });
                  while (!done && ticks < 1000000) {
                      ++ticks;
                      co_await yield();
                  }
                  EXPECT_EQ(co_await std::move(text), "fiber reads this");
                  EXPECT_GT(ticks, 0);
              }),
              0);
}

TEST(thread, yield_interleaves_fibers) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  std::vector<int> order;
                  auto worker = [&order](int id) {
                      return async([&order, id] {
                          for (int i = 0; i < 3; ++i) {
                              order.push_back(id * 10 + i);
                              thread::yield();
                          }
                      });
                  };
                  auto a = worker(1);
                  auto b = worker(2);
                  co_await std::move(a);
                  co_await std::move(b);
                  EXPECT_EQ(order, (std::vector<int>{10, 20, 11, 21, 12, 22}));
              }),
              0);
}

TEST(thread, many_fibers_waiting_at_once) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  std::vector<future<int>> fs;
                  for (int i = 0; i < 100; ++i) {
                      fs.push_back(async(thread_attributes{32 * 1024}, [i] {
                          sleep(std::chrono::milliseconds(i % 5)).get();
                          return i;
                      }));
                  }
                  auto values = co_await when_all_succeed(std::move(fs));
                  long sum = 0;
                  for (int v : values) {
                      sum += v;
                  }
                  EXPECT_EQ(sum, 99 * 100 / 2);
              }),
              0);
}

TEST(thread, nested_async) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto v = co_await async([] { return async([] { return 5; }).get() + 1; });
                  EXPECT_EQ(v, 6);
              }),
              0);
}

TEST(thread, thread_join) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  int value = 0;
                  thread t([&value] {
                      sleep(1ms).get();
                      value = 3;
                  });
                  co_await t.join();
                  EXPECT_EQ(value, 3);

                  thread failing([] { throw test_error("join sees it"); });
                  bool caught = false;
                  try {
                      co_await failing.join();
                  } catch (const test_error&) {
                      caught = true;
                  }
                  EXPECT_TRUE(caught);
              }),
              0);
}

TEST(thread, stack_size_is_configurable) {
    EXPECT_EQ(
        run_in_shard([]() -> future<> {
            const size_t page = size_t(::sysconf(_SC_PAGESIZE));
            for (size_t size : {size_t(64 * 1024), size_t(1024 * 1024), size_t(4 * 1024 * 1024)}) {
                auto room = co_await async(thread_attributes{size}, [] { return measure_stack_room(); });
                // The usable stack is the requested size: what is left below the measuring
                // frame is at most that, and only the little the fiber used so far is missing.
                EXPECT_LE(room.below, size) << size;
                EXPECT_GT(room.below, size - 32 * 1024) << size;
                EXPECT_TRUE(room.guarded) << size;
            }
            auto def = co_await async([] { return measure_stack_room(); });
            EXPECT_LE(def.below, thread_attributes{}.stack_size);
            EXPECT_GT(def.below, thread_attributes{}.stack_size - 32 * 1024);
            // A size that is not a multiple of the page size is rounded up.
            auto odd = co_await async(thread_attributes{100 * 1000}, [] { return measure_stack_room(); });
            EXPECT_LE(odd.below, (100 * 1000 + page - 1) / page * page);
            EXPECT_GT(odd.below, 100 * 1000 - 32 * 1024);
            // A large stack really is usable.
            auto used =
                co_await async(thread_attributes{8 * 1024 * 1024}, [] { return use_stack(6 * 1024 * 1024); });
            EXPECT_EQ(used, 6u * 1024 * 1024 / 4096);
        }),
        0);
}
