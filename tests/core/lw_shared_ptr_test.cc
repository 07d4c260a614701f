// lw_shared_ptr: counting, the last reference destroying the object, const views,
// enable_lw_shared_from_this, and a reference kept alive across a continuation.
#include "core/future.hh"
#include "core/lw_shared_ptr.hh"
#include "support/run.hh"

#include <string>
#include <utility>

#include <gtest/gtest.h>

using namespace shoal;
using shoal::testing::run_in_shard;

namespace {

/// Counts its live instances.
struct tracked {
    explicit tracked(int v, int& live)
        : value(v)
        , live(live) {
        ++live;
    }
    ~tracked() { --live; }
    int value;
    int& live;
};

/// Keeps its own count and can make pointers to itself.
struct self_shared : enable_lw_shared_from_this<self_shared> {
    explicit self_shared(int& live)
        : live(live) {
        ++live;
    }
    ~self_shared() { --live; }
    int& live;
};

} // namespace

TEST(lw_shared_ptr, the_last_reference_destroys_the_object) {
    int live = 0;
    {
        auto p = make_lw_shared<tracked>(7, live);
        EXPECT_EQ(live, 1);
        EXPECT_EQ(p->value, 7);
        EXPECT_EQ(p.use_count(), 1);
        EXPECT_TRUE(p.owned());
        auto q = p;
        EXPECT_EQ(p.use_count(), 2);
        EXPECT_FALSE(p.owned());
        EXPECT_TRUE(p == q);
        auto r = std::move(q);
        EXPECT_FALSE(q);
        EXPECT_TRUE(q == nullptr);
        EXPECT_EQ(p.use_count(), 2);
        p.reset();
        EXPECT_EQ(live, 1);
        EXPECT_EQ(r.use_count(), 1);
        r = r; // self-assignment keeps it
        EXPECT_EQ(live, 1);
        r = nullptr;
        EXPECT_EQ(live, 0);
        EXPECT_EQ(r.use_count(), 0);
        EXPECT_EQ(r.get(), nullptr);
    }
    EXPECT_EQ(live, 0);
}

TEST(lw_shared_ptr, values_const_views_and_swaps) {
    auto s = make_lw_shared(std::string("text")); // deduced from the value
    lw_shared_ptr<const std::string> view = s;
    EXPECT_EQ(*view, "text");
    EXPECT_EQ(s.use_count(), 2);
    s->append("!");
    EXPECT_EQ(*view, "text!");
    auto other = make_lw_shared<std::string>(3, 'x');
    s.swap(other);
    EXPECT_EQ(*s, "xxx");
    EXPECT_EQ(*other, "text!");
    EXPECT_EQ(other.use_count(), 2);
    lw_shared_ptr<int> empty;
    EXPECT_FALSE(empty);
    auto copy = empty;
    EXPECT_EQ(copy.use_count(), 0);
}

TEST(lw_shared_ptr, shared_from_this_shares_the_objects_own_count) {
    int live = 0;
    {
        auto p = make_lw_shared<self_shared>(live);
        EXPECT_EQ(sizeof(p), sizeof(void*));
        auto q = p->shared_from_this();
        EXPECT_EQ(p.use_count(), 2);
        EXPECT_EQ(q.get(), p.get());
        const self_shared& c = *p;
        lw_shared_ptr<const self_shared> cq = c.shared_from_this();
        EXPECT_EQ(p.use_count(), 3);
        p.reset();
        q.reset();
        EXPECT_EQ(live, 1);
        EXPECT_EQ(cq.use_count(), 1);
    }
    EXPECT_EQ(live, 0);
}

TEST(lw_shared_ptr, keeps_an_object_alive_across_a_continuation) {
    EXPECT_EQ(run_in_shard([]() -> future<> {
                  int live = 0;
                  promise<> p;
                  auto f =
                      p.get_future().then([obj = make_lw_shared<tracked>(1, live)] { return obj->value; });
                  EXPECT_EQ(live, 1);
                  p.set_value();
                  EXPECT_EQ(co_await std::move(f), 1);
                  EXPECT_EQ(live, 0);
              }),
              0);
}
