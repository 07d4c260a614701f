// future<T> / promise<T>: values, exceptions, continuations (ready and pending), ordering, and
// the links between a promise and its future surviving moves.
#include "core/future.hh"
#include "core/future_util.hh"
#include "support/run.hh"
#include "test_failures.hh"

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

using namespace shoal;
using shoal::testing::failure_of;
using shoal::testing::run_in_shard;
using shoal::testing::test_error;

namespace {} // namespace

// --- ready futures: no reactor needed, everything runs inline -------------------------------

TEST(future, ready_future_holds_its_value) {
    auto f = make_ready_future<int>(42);
    ASSERT_TRUE(f.available());
    EXPECT_FALSE(f.failed());
    EXPECT_EQ(f.get(), 42);
    auto v = make_ready_future<>();
    EXPECT_TRUE(v.available());
    v.get();
}

TEST(future, then_on_ready_future_runs_inline) {
    bool ran = false;
    auto f = make_ready_future<int>(1).then([&](int x) {
        ran = true;
        return x + 1;
    });
    EXPECT_TRUE(ran);
    ASSERT_TRUE(f.available());
    EXPECT_EQ(f.get(), 2);
}

TEST(future, then_changes_types_and_unwraps_futures) {
    auto f = make_ready_future<int>(7)
                 .then([](int x) { return std::to_string(x); })
                 .then([](std::string s) { return make_ready_future<std::string>(s + "!"); })
                 .then([](std::string s) { return s.size(); });
    static_assert(std::is_same_v<decltype(f), future<size_t>>);
    EXPECT_EQ(f.get(), 2u);
    auto v = make_ready_future<int>(1).then([](int) {});
    static_assert(std::is_same_v<decltype(v), future<>>);
    EXPECT_TRUE(v.available());
}

TEST(future, move_only_values) {
    auto f =
        make_ready_future<std::unique_ptr<int>>(std::make_unique<int>(5)).then([](std::unique_ptr<int> p) {
            *p += 1;
            return p;
        });
    EXPECT_EQ(*f.get(), 6);
}

TEST(future, exception_skips_then_and_propagates) {
    bool ran = false;
    auto f = make_exception_future<int>(test_error("boom")).then([&](int x) {
        ran = true;
        return x;
    });
    EXPECT_FALSE(ran);
    EXPECT_EQ(failure_of(f), "boom");
}

TEST(future, exception_ptr_overload) {
    auto f = make_exception_future<>(std::make_exception_ptr(test_error("ptr")));
    EXPECT_EQ(failure_of(f), "ptr");
}

TEST(future, throwing_continuation_makes_exceptional_future) {
    auto f = make_ready_future<int>(1).then([](int) -> int { throw test_error("thrown"); });
    EXPECT_EQ(failure_of(f), "thrown");
    auto g = make_ready_future<>().then([]() -> future<> { throw test_error("from future-returning"); });
    EXPECT_EQ(failure_of(g), "from future-returning");
}

TEST(future, get_rethrows) {
    auto f = make_exception_future<int>(test_error("get"));
    EXPECT_THROW(f.get(), test_error);
}

TEST(future, then_wrapped_sees_value_and_exception) {
    auto ok = make_ready_future<int>(3).then_wrapped([](future<int> f) {
        EXPECT_FALSE(f.failed());
        return f.get() * 2;
    });
    EXPECT_EQ(ok.get(), 6);
    auto bad = make_exception_future<int>(test_error("x")).then_wrapped([](future<int> f) {
        EXPECT_TRUE(f.failed());
        f.ignore_ready_future();
        return std::string("recovered");
    });
    EXPECT_EQ(bad.get(), "recovered");
}

TEST(future, handle_exception_recovers_only_failures) {
    bool called = false;
    auto ok = make_ready_future<int>(1).handle_exception([&](std::exception_ptr) {
        called = true;
        return 0;
    });
    EXPECT_EQ(ok.get(), 1);
    EXPECT_FALSE(called);

    auto bad = make_exception_future<int>(test_error("e")).handle_exception([&](std::exception_ptr ex) {
        called = true;
        EXPECT_THROW(std::rethrow_exception(ex), test_error);
        return 9;
    });
    EXPECT_TRUE(called);
    EXPECT_EQ(bad.get(), 9);

    auto rethrown = make_exception_future<>(test_error("first")).handle_exception([](std::exception_ptr) {
        return make_exception_future<>(test_error("second"));
    });
    EXPECT_EQ(failure_of(rethrown), "second");
}

TEST(future, finally_keeps_the_outcome) {
    int calls = 0;
    auto ok = make_ready_future<int>(5).finally([&] { ++calls; });
    EXPECT_EQ(ok.get(), 5);
    auto bad = make_exception_future<int>(test_error("kept")).finally([&] { ++calls; });
    EXPECT_EQ(failure_of(bad), "kept");
    EXPECT_EQ(calls, 2);
}

TEST(future, finally_failure_replaces_the_outcome) {
    auto thrown = make_ready_future<int>(5).finally([] { throw test_error("finally threw"); });
    EXPECT_EQ(failure_of(thrown), "finally threw");
    auto returned = make_exception_future<int>(test_error("original")).finally([] {
        return make_exception_future<>(test_error("replaced"));
    });
    EXPECT_EQ(failure_of(returned), "replaced");
}

TEST(future, discard_result) {
    auto f = make_ready_future<int>(3).discard_result();
    static_assert(std::is_same_v<decltype(f), future<>>);
    EXPECT_TRUE(f.available());
    EXPECT_FALSE(f.failed());
    auto g = make_exception_future<int>(test_error("d")).discard_result();
    EXPECT_EQ(failure_of(g), "d");
}

TEST(future, futurize_invoke_wraps_values_exceptions_and_futures) {
    EXPECT_EQ(futurize_invoke([] { return 1; }).get(), 1);
    auto v = futurize_invoke([] {});
    static_assert(std::is_same_v<decltype(v), future<>>);
    auto e = futurize_invoke([]() -> int { throw test_error("fi"); });
    EXPECT_EQ(failure_of(e), "fi");
    EXPECT_EQ(futurize_invoke([](int a, int b) { return make_ready_future<int>(a + b); }, 2, 3).get(), 5);
}

// --- promise/future links -----------------------------------------------------------------

TEST(promise, set_before_get_future) {
    promise<int> p;
    p.set_value(11);
    auto f = p.get_future();
    ASSERT_TRUE(f.available());
    EXPECT_EQ(f.get(), 11);

    promise<> e;
    e.set_exception(test_error("early"));
    auto g = e.get_future();
    EXPECT_EQ(failure_of(g), "early");
}

TEST(promise, set_before_get_future_then_moved) {
    promise<std::string> p;
    p.set_value("moved early");
    promise<std::string> q(std::move(p));
    auto f = q.get_future();
    ASSERT_TRUE(f.available());
    EXPECT_EQ(f.get(), "moved early");
}

TEST(promise, value_reaches_a_moved_future) {
    promise<int> p;
    auto f1 = p.get_future();
    auto f2 = std::move(f1);
    std::vector<future<int>> many;
    many.push_back(std::move(f2));
    for (int i = 0; i < 100; ++i) { // reallocations move the pending future around
        many.push_back(make_ready_future<int>(i));
    }
    EXPECT_FALSE(many[0].available());
    p.set_value(77);
    ASSERT_TRUE(many[0].available());
    EXPECT_EQ(many[0].get(), 77);
}

TEST(promise, moved_promise_still_feeds_its_future) {
    promise<int> p;
    auto f = p.get_future();
    std::vector<promise<int>> ps;
    ps.push_back(std::move(p));
    for (int i = 0; i < 50; ++i) {
        ps.emplace_back();
    }
    promise<int> q;
    q = std::move(ps[0]);
    q.set_value(3);
    ASSERT_TRUE(f.available());
    EXPECT_EQ(f.get(), 3);
}

TEST(promise, move_assigning_a_future_drops_its_old_link) {
    promise<int> p1, p2;
    auto f = p1.get_future();
    f = p2.get_future();
    p1.set_value(1); // nobody listens any more: dropped
    EXPECT_FALSE(f.available());
    p2.set_value(2);
    EXPECT_EQ(f.get(), 2);
}

TEST(promise, value_after_future_destroyed_is_dropped) {
    promise<std::string> p;
    { auto f = p.get_future(); }
    p.set_value("nobody"); // must not crash or leak
    SUCCEED();
}

TEST(promise, destroyed_promise_breaks_the_future) {
    future<int> f = [] {
        promise<int> p;
        return p.get_future();
    }();
    ASSERT_TRUE(f.available());
    EXPECT_THROW(f.get(), broken_promise);
}

TEST(promise, destroyed_unused_promise_is_harmless) {
    { promise<int> p; }
    {
        promise<int> p;
        p.set_value(1);
    }
    SUCCEED();
}

TEST(promise, second_value_is_ignored) {
    promise<int> p;
    auto f = p.get_future();
    p.set_value(1);
    p.set_value(2);
    EXPECT_EQ(f.get(), 1);
}

TEST(future, get_on_pending_future_outside_fiber_throws) {
    promise<int> p;
    auto f = p.get_future();
    EXPECT_THROW(f.get(), std::logic_error);
    p.set_value(1);
    EXPECT_EQ(f.get(), 1);
}

TEST(future, forward_to_ready) {
    promise<int> p;
    auto f = p.get_future();
    make_ready_future<int>(8).forward_to(std::move(p));
    EXPECT_EQ(f.get(), 8);
}

TEST(future, forward_to_pending_retargets_the_feeder) {
    promise<int> source;
    auto middle = source.get_future();
    promise<int> dest;
    auto f = dest.get_future();
    middle.forward_to(std::move(dest));
    EXPECT_FALSE(f.available());
    source.set_value(4);
    ASSERT_TRUE(f.available());
    EXPECT_EQ(f.get(), 4);
}

// --- pending continuations: need a reactor to run the scheduled tasks -----------------------

TEST(future, pending_then_runs_only_when_resolved) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<int> p;
                  bool ran = false;
                  auto f = p.get_future().then([&](int x) {
                      ran = true;
                      return x * 10;
                  });
                  EXPECT_FALSE(f.available());
                  co_await yield();
                  EXPECT_FALSE(ran);
                  p.set_value(4);
                  EXPECT_FALSE(ran); // scheduled, not run inline
                  EXPECT_EQ(co_await std::move(f), 40);
                  EXPECT_TRUE(ran);
              }),
              0);
}

TEST(future, continuations_run_in_resolution_order) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  std::vector<int> order;
                  promise<> p[4];
                  std::vector<future<>> fs;
                  for (int i = 0; i < 4; ++i) {
                      fs.push_back(p[i].get_future().then([&order, i] { order.push_back(i); }));
                  }
                  p[2].set_value();
                  p[0].set_value();
                  p[3].set_value();
                  p[1].set_value();
                  co_await when_all(std::move(fs));
                  EXPECT_EQ(order, (std::vector<int>{2, 0, 3, 1}));
              }),
              0);
}

TEST(future, chain_steps_run_in_order) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  std::vector<int> order;
                  promise<> p;
                  auto f = p.get_future()
                               .then([&] { order.push_back(1); })
                               .then([&] {
                                   order.push_back(2);
                                   return yield();
                               })
                               .then([&] { order.push_back(3); })
                               .finally([&] { order.push_back(4); });
                  order.push_back(0);
                  p.set_value();
                  co_await std::move(f);
                  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
              }),
              0);
}

TEST(future, pending_inner_future_is_forwarded) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<int> outer;
                  promise<std::string> inner;
                  auto f = outer.get_future().then([&](int x) {
                      return inner.get_future().then([x](std::string s) { return s + std::to_string(x); });
                  });
                  outer.set_value(5);
                  co_await yield();
                  co_await yield();
                  EXPECT_FALSE(f.available());
                  inner.set_value("v");
                  EXPECT_EQ(co_await std::move(f), "v5");
              }),
              0);
}

TEST(future, pending_exception_skips_and_reaches_handlers) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<int> p;
                  int thens = 0;
                  bool finally_ran = false;
                  auto f = p.get_future()
                               .then([&](int x) {
                                   ++thens;
                                   return x;
                               })
                               .then([&](int x) {
                                   ++thens;
                                   return x;
                               })
                               .finally([&] { finally_ran = true; })
                               .handle_exception([](std::exception_ptr ex) {
                                   try {
                                       std::rethrow_exception(ex);
                                   } catch (const test_error& e) {
                                       return int(std::string(e.what()).size());
                                   }
                                   return 0;
                               });
                  p.set_exception(test_error("four"));
                  auto r = co_await std::move(f);
                  EXPECT_EQ(thens, 0);
                  EXPECT_TRUE(finally_ran);
                  EXPECT_EQ(r, 4);
              }),
              0);
}

TEST(future, exception_thrown_in_pending_continuation) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<> p;
                  auto f = p.get_future().then([]() -> int { throw test_error("late"); });
                  p.set_value();
                  bool caught = false;
                  try {
                      co_await std::move(f);
                  } catch (const test_error& e) {
                      caught = std::string(e.what()) == "late";
                  }
                  EXPECT_TRUE(caught);
              }),
              0);
}

TEST(future, pending_then_wrapped) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<int> p;
                  auto f = p.get_future().then_wrapped([](future<int> r) {
                      EXPECT_TRUE(r.failed());
                      r.ignore_ready_future();
                      return 1;
                  });
                  p.set_exception(test_error("w"));
                  EXPECT_EQ(co_await std::move(f), 1);
              }),
              0);
}

TEST(future, broken_promise_reaches_a_waiting_continuation) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  auto p = std::make_unique<promise<int>>();
                  auto f = p->get_future().then([](int x) { return x; });
                  p.reset();
                  bool broken = false;
                  try {
                      co_await std::move(f);
                  } catch (const broken_promise&) {
                      broken = true;
                  }
                  EXPECT_TRUE(broken);
              }),
              0);
}

TEST(future, future_moved_while_pending_then_chained) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<int> p;
                  auto f = p.get_future();
                  auto g = std::move(f);
                  std::vector<future<int>> v;
                  v.push_back(std::move(g));
                  for (int i = 0; i < 64; ++i) { // reallocations move the pending future
                      v.push_back(make_ready_future<int>(i));
                  }
                  auto chained = std::move(v[0]).then([](int x) { return x + 1; });
                  v.clear();
                  p.set_value(1);
                  EXPECT_EQ(co_await std::move(chained), 2);
              }),
              0);
}

TEST(future, promise_moved_after_continuation_attached) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<int> p;
                  auto f = p.get_future().then([](int x) { return x * 3; });
                  promise<int> q(std::move(p));
                  std::vector<promise<int>> store;
                  store.push_back(std::move(q));
                  co_await yield();
                  store[0].set_value(7);
                  EXPECT_EQ(co_await std::move(f), 21);
              }),
              0);
}

TEST(future, forward_to_a_continuation_promise) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  promise<int> a;
                  promise<int> b;
                  auto fb = b.get_future().then([](int x) { return x + 100; });
                  a.get_future().forward_to(std::move(b));
                  a.set_value(1);
                  EXPECT_EQ(co_await std::move(fb), 101);
              }),
              0);
}

// --- failures nobody looked at ----------------------------------------------------------------

namespace {
/// How many times `needle` occurs in `text`.
size_t occurrences(const std::string& text, const std::string& needle) {
    size_t n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
        ++n;
    }
    return n;
}
} // namespace

TEST(ignored_failure, a_dropped_failed_future_is_reported_exactly_once) {
    uint64_t before = ignored_failed_futures();
    ::testing::internal::CaptureStderr();
    {
        auto f = make_exception_future<int>(test_error("nobody looked at me"));
        auto g = std::move(f); // moves carry the failure without reporting it
        future<int> h = std::move(g);
    }
    std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(ignored_failed_futures(), before + 1);
    EXPECT_EQ(occurrences(log, "nobody looked at me"), 1u) << log;
    EXPECT_EQ(occurrences(log, "exceptional future ignored"), 1u) << log;
}

TEST(ignored_failure, a_failure_set_after_the_future_was_dropped_is_reported) {
    uint64_t before = ignored_failed_futures();
    promise<int> p;
    { auto f = p.get_future(); }
    p.set_exception(test_error("too late"));
    EXPECT_EQ(ignored_failed_futures(), before + 1);
}

TEST(ignored_failure, a_failed_promise_whose_future_was_never_taken_is_reported) {
    uint64_t before = ignored_failed_futures();
    {
        promise<> p;
        p.set_exception(test_error("never taken"));
    }
    EXPECT_EQ(ignored_failed_futures(), before + 1);
}

TEST(ignored_failure, consumed_failures_are_not_reported) {
    uint64_t before = ignored_failed_futures();
    auto fail = [] { return make_exception_future<int>(test_error("seen")); };
    EXPECT_THROW(fail().get(), test_error);
    EXPECT_TRUE(fail().get_exception() != nullptr);
    fail().ignore_ready_future();
    EXPECT_EQ(fail().handle_exception([](std::exception_ptr) { return 7; }).get(), 7);
    EXPECT_EQ(fail().then_wrapped([](future<int> f) { return f.get_exception() ? 1 : 0; }).get(), 1);
    auto chained = fail().then([](int x) { return x + 1; }).finally([] {});
    EXPECT_THROW(chained.get(), test_error);
    EXPECT_EQ(ignored_failed_futures(), before);
    EXPECT_EQ(run_in_shard([&]() -> future<> {
                  promise<int> p;
                  auto f = p.get_future().then([](int x) { return x; });
                  p.set_exception(test_error("pending, then awaited"));
                  try {
                      co_await std::move(f);
                      ADD_FAILURE() << "no exception";
                  } catch (const test_error&) {
                  }
              }),
              0);
    EXPECT_EQ(ignored_failed_futures(), before);
}

TEST(ignored_failure, the_runner_fails_a_run_that_dropped_a_failure) {
    ::testing::TestPartResultArray failures;
    int rc = 0;
    {
        ::testing::ScopedFakeTestPartResultReporter reporter(
            ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ALL_THREADS, &failures);
        rc = run_in_shard([]() -> future<> {
            (void)make_exception_future<>(test_error("dropped by the test"));
            return make_ready_future<>();
        });
    }
    EXPECT_EQ(rc, 1);
    ASSERT_EQ(failures.size(), 1);
    EXPECT_NE(std::string(failures.GetTestPartResult(0).message()).find("exceptional future ignored"),
              std::string::npos)
        << failures.GetTestPartResult(0).message();
}

TEST(ignored_failure, the_runner_accepts_the_drops_a_test_declared) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  // The test's own failure, dropped on purpose: what the declaration is for.
                  shoal::testing::expect_dropped_futures(1);
                  (void)make_exception_future<>(test_error("dropped on purpose"));
                  return make_ready_future<>();
              }),
              0);
    // The declaration ended with the run: a further drop fails again.
    ::testing::TestPartResultArray failures;
    {
        ::testing::ScopedFakeTestPartResultReporter reporter(
            ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ALL_THREADS, &failures);
        EXPECT_EQ(run_in_shard([]() -> future<> {
                      (void)make_exception_future<>(test_error("not declared"));
                      return make_ready_future<>();
                  }),
                  1);
    }
    EXPECT_EQ(failures.size(), 1);
}
