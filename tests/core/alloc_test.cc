// Allocation costs of futures, counted by replacing the global operator new in this binary only:
// a `then` on a ready future allocates nothing; a `then` on a pending one allocates exactly one
// continuation, also when its function returns a pending future (forwarded, not wrapped); a
// condition_variable wait that queues costs one pooled waiter.
#include "core/condition_variable.hh"
#include "core/future.hh"
#include "core/future_util.hh"
#include "core/reactor.hh"
#include "core/small_pool.hh"
#include "core/smp.hh"
#include "support/run.hh"

#include <cstdlib>
#include <new>
#include <optional>

#include <gtest/gtest.h>

// The replacements below pair malloc/free; GCC cannot see that and warns at every inlined
// new/delete pair of this file.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {

/// Counting is per thread and only while a `counting` scope is alive, so the engine's other
/// threads and GoogleTest's own bookkeeping do not disturb it.
thread_local bool tl_counting = false;
thread_local long tl_allocations = 0;

void* counted_alloc(std::size_t n, std::size_t align = 0) {
    if (tl_counting) {
        ++tl_allocations;
    }
    if (n == 0) {
        n = 1;
    }
    void* p = nullptr;
    if (align > alignof(std::max_align_t)) {
        n = (n + align - 1) / align * align;
        p = std::aligned_alloc(align, n);
    } else {
        p = std::malloc(n);
    }
    return p;
}

/// Counts heap objects made on this thread while alive: operator new calls plus objects the
/// shard's small-object pool handed out again from its free lists (core/small_pool.hh).
class counting {
public:
    counting()
        : _reused_before(shoal::internal::small_pool::reused()) {
        tl_allocations = 0;
        tl_counting = true;
    }
    ~counting() { tl_counting = false; }
    /// Objects allocated, from malloc or recycled.
    long allocations() const noexcept { return tl_allocations + reused(); }
    /// Only the operator new calls.
    long mallocs() const noexcept { return tl_allocations; }
    /// Only the objects recycled by the pool.
    long reused() const noexcept { return long(shoal::internal::small_pool::reused() - _reused_before); }

private:
    uint64_t _reused_before;
};

} // namespace

void* operator new(std::size_t n) {
    if (void* p = counted_alloc(n)) {
        return p;
    }
    throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
    if (void* p = counted_alloc(n)) {
        return p;
    }
    throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    return counted_alloc(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
    return counted_alloc(n);
}
void* operator new(std::size_t n, std::align_val_t a) {
    if (void* p = counted_alloc(n, std::size_t(a))) {
        return p;
    }
    throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) {
    if (void* p = counted_alloc(n, std::size_t(a))) {
        return p;
    }
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete[](void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
    std::free(p);
}

using namespace shoal;
using shoal::testing::run_in_shard;

namespace {

/// Counting stays on while a coroutine is suspended, and whatever else runs on the thread then is
/// counted too. A test body's first suspension returns into run_in_shards, which attaches its own
/// continuations: this lets that happen before counting starts.
future<> settle() {
    return yield();
}

/// A task that resolves a promise when the reactor runs it; reused, so it allocates nothing.
struct resolver final : task {
    promise<int> pr;
    int value = 0;
    void run_and_dispose() noexcept override { pr.set_value(value); }
};

} // namespace

TEST(alloc, the_counter_sees_allocations) {
    counting c;
    auto* p = new int(1);
    auto* q = new (std::nothrow) int(2);
    delete p;
    delete q;
    EXPECT_EQ(c.allocations(), 2);
}

TEST(alloc, ready_then_allocates_nothing) {
    long n;
    int result;
    {
        counting c;
        auto f = make_ready_future<int>(1)
                     .then([](int x) { return x + 1; })
                     .then([](int x) { return make_ready_future<int>(x * 2); })
                     .then_wrapped([](future<int> f) { return f.get() + 1; })
                     .finally([] {})
                     .handle_exception([](std::exception_ptr) { return 0; });
        result = f.get();
        n = c.allocations();
    }
    EXPECT_EQ(result, 5);
    EXPECT_EQ(n, 0);
}

TEST(alloc, promise_set_before_get_future_allocates_nothing) {
    counting c;
    promise<int> p;
    p.set_value(3);
    auto f = p.get_future().then([](int x) { return x + 1; });
    EXPECT_EQ(f.get(), 4);
    EXPECT_EQ(c.allocations(), 0);
}

TEST(alloc, linking_a_promise_and_its_future_allocates_nothing) {
    counting c;
    promise<int> p;
    auto f = p.get_future();
    auto g = std::move(f);
    promise<int> q(std::move(p));
    q.set_value(1);
    EXPECT_EQ(g.get(), 1);
    EXPECT_EQ(c.allocations(), 0);
}

TEST(alloc, pending_then_allocates_one_continuation) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  co_await settle();
                  resolver r;
                  r.value = 20;
                  long attach = 0;
                  long total = 0;
                  int result = 0;
                  {
                      counting c;
                      auto f = r.pr.get_future().then([](int x) { return x + 1; });
                      attach = c.allocations();
                      schedule(&r); // resolves the promise from the reactor's queue
                      result = co_await std::move(f);
                      total = c.allocations();
                  }
                  EXPECT_EQ(result, 21);
                  EXPECT_EQ(attach, 1);
                  EXPECT_EQ(total, 1); // running it, forwarding the value, resuming: nothing more
              }),
              0);
}

TEST(alloc, pending_chain_costs_one_allocation_per_step) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  co_await settle();
                  resolver r;
                  r.value = 1;
                  long n = 0;
                  int result = 0;
                  {
                      counting c;
                      auto f = r.pr.get_future()
                                   .then([](int x) { return x + 1; })
                                   .then_wrapped([](future<int> f) { return f.get() + 1; })
                                   .finally([] {});
                      schedule(&r);
                      result = co_await std::move(f);
                      n = c.allocations();
                  }
                  EXPECT_EQ(result, 3);
                  // then, then_wrapped, finally's then_wrapped; finally's inner then_wrapped runs on
                  // a ready future and allocates nothing.
                  EXPECT_EQ(n, 3);
              }),
              0);
}

TEST(alloc, continuation_returning_pending_future_is_forwarded_without_allocation) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  co_await settle();
                  resolver outer;
                  resolver inner;
                  outer.value = 1;
                  inner.value = 10;
                  long n = 0;
                  int result = 0;
                  {
                      counting c;
                      auto f = outer.pr.get_future().then([&inner](int x) {
                          // A pending future of its own: forward_to retargets inner's promise.
                          schedule(&inner);
                          return inner.pr.get_future().then_wrapped(
                              [x](future<int> v) { return v.get() + x; });
                      });
                      schedule(&outer);
                      result = co_await std::move(f);
                      n = c.allocations();
                  }
                  EXPECT_EQ(result, 11);
                  EXPECT_EQ(n, 2); // the outer then and the inner then_wrapped; no wrapper for forwarding
              }),
              0);
}

TEST(alloc, co_await_allocates_nothing_beyond_the_frame) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  co_await settle();
                  resolver r;
                  r.value = 5;
                  long ready = -1;
                  long pending = -1;
                  {
                      counting c;
                      int v = co_await make_ready_future<int>(4);
                      ready = c.allocations();
                      EXPECT_EQ(v, 4);
                  }
                  {
                      counting c;
                      auto f = r.pr.get_future();
                      schedule(&r);
                      int v = co_await std::move(f); // suspends: the frame itself is the waiter
                      pending = c.allocations();
                      EXPECT_EQ(v, 5);
                  }
                  EXPECT_EQ(ready, 0);
                  EXPECT_EQ(pending, 0);
              }),
              0);
}

TEST(alloc, submit_io_costs_one_allocation) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  co_await settle();
                  long n = 0;
                  int rc = -1;
                  {
                      counting c;
                      auto f = local_reactor().submit_io([](io_uring_sqe* sqe) { io_uring_prep_nop(sqe); });
                      rc = co_await std::move(f);
                      n = c.allocations();
                  }
                  EXPECT_EQ(rc, 0);
                  EXPECT_EQ(n, 1);
              }),
              0);
}

TEST(alloc, a_warm_pool_serves_pending_continuations_without_malloc) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  co_await settle();
                  auto chain = [](int links) -> future<int> {
                      promise<int> p;
                      future<int> f = p.get_future();
                      for (int i = 0; i < links; ++i) {
                          f = std::move(f).then([](int x) { return x + 1; });
                      }
                      p.set_value(0);
                      return f;
                  };
                  int warm = co_await chain(100); // fills the free list of this continuation's size
                  EXPECT_EQ(warm, 100);
                  long objects = 0;
                  long mallocs = 0;
                  int result = 0;
                  {
                      counting c;
                      auto f = chain(100);
                      result = co_await std::move(f);
                      objects = c.allocations();
                      mallocs = c.mallocs();
                  }
                  EXPECT_EQ(result, 100);
                  EXPECT_EQ(objects, 100); // one continuation per link, as before
                  if (shoal::internal::small_pool::enabled) {
                      EXPECT_EQ(mallocs, 0); // all of them recycled
                  } else {
                      EXPECT_EQ(mallocs, 100); // ASan builds bypass the pool
                  }
              }),
              0);
}

TEST(alloc, a_warm_pool_serves_cross_shard_messages_without_malloc) {
    EXPECT_EQ(shoal::testing::run_in_shards(2,
                                            []() -> future<> {
                                                co_await settle();
                                                auto burst = []() -> future<uint64_t> {
                                                    std::vector<future<uint64_t>> fs;
                                                    fs.reserve(64);
                                                    for (uint64_t i = 0; i < 64; ++i) {
                                                        fs.push_back(submit_to(1, [i] { return i; }));
                                                    }
                                                    uint64_t sum = 0;
                                                    for (auto& f : fs) {
                                                        sum += co_await std::move(f);
                                                    }
                                                    co_return sum;
                                                };
                                                EXPECT_EQ(co_await burst(), 2016u); // warms the pool
                                                long mallocs = -1;
                                                long reused = -1;
                                                uint64_t sum = 0;
                                                std::vector<future<uint64_t>> fs;
                                                fs.reserve(64);
                                                {
                                                    counting c;
                                                    for (uint64_t i = 0; i < 64; ++i) {
                                                        fs.push_back(submit_to(1, [i] { return i; }));
                                                    }
                                                    mallocs = c.mallocs();
                                                    reused = c.reused();
                                                }
                                                for (auto& f : fs) {
                                                    sum += co_await std::move(f);
                                                }
                                                EXPECT_EQ(sum, 2016u);
                                                if (shoal::internal::small_pool::enabled) {
                                                    EXPECT_EQ(mallocs, 0);
                                                    EXPECT_EQ(reused, 64);
                                                } else {
                                                    EXPECT_EQ(mallocs, 64);
                                                }
                                            }),
              0);
}

TEST(alloc, a_condition_variable_wait_costs_one_pooled_waiter) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  co_await settle();
                  condition_variable cv;
                  abort_source as;
                  long objects = -1;
                  long mallocs = -1;
                  // The first round fills the free list of the waiter's size and the reactor's
                  // timer heap; the second one is counted.
                  for (int round = 0; round < 2; ++round) {
                      std::optional<counting> c;
                      if (round == 1) {
                          c.emplace();
                      }
                      auto timed = cv.wait(steady_clock_type::now() + std::chrono::seconds(10));
                      auto abortable = cv.wait(as);
                      cv.broadcast();
                      co_await std::move(timed);
                      co_await std::move(abortable);
                      if (c) {
                          objects = c->allocations();
                          mallocs = c->mallocs();
                      }
                  }
                  EXPECT_EQ(objects, 2); // one waiter each: promise, timer and subscription in one
                  if (shoal::internal::small_pool::enabled) {
                      EXPECT_EQ(mallocs, 0);
                  } else {
                      EXPECT_EQ(mallocs, 2);
                  }
              }),
              0);
}
