// weak_ptr: pointers that become null when their object dies, copies, moves, reassignments.
#include "core/weak_ptr.hh"

#include <memory>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;

namespace {

struct node : weakly_referencable<node> {
    explicit node(int v)
        : value(v) {}
    int value;
};

} // namespace

TEST(weak_ptr, becomes_null_when_the_object_dies) {
    auto n = std::make_unique<node>(5);
    weak_ptr<node> w = n->weak_from_this();
    EXPECT_TRUE(w);
    EXPECT_EQ(w->value, 5);
    EXPECT_EQ(w.get(), n.get());
    std::vector<weak_ptr<node>> many(10, w);
    weak_ptr<node> moved = std::move(many.back());
    EXPECT_FALSE(many.back());
    n.reset();
    EXPECT_FALSE(w);
    EXPECT_EQ(w.get(), nullptr);
    EXPECT_TRUE(moved == nullptr);
    for (auto& m : many) {
        EXPECT_FALSE(m);
    }
}

TEST(weak_ptr, reassignments_and_resets_leave_the_right_list) {
    node a(1);
    node b(2);
    weak_ptr<node> w = a.weak_from_this();
    weak_ptr<node> x = w;
    x = b.weak_from_this();
    EXPECT_EQ(x->value, 2);
    w = w; // self-assignment keeps it
    EXPECT_EQ(w->value, 1);
    weak_ptr<node> y;
    y = std::move(x);
    EXPECT_FALSE(x);
    EXPECT_EQ(y->value, 2);
    w.reset();
    EXPECT_FALSE(w);
    {
        node c(3);
        w = c.weak_from_this();
        x = w;
    }
    EXPECT_FALSE(w);
    EXPECT_FALSE(x);
    EXPECT_TRUE(y);
}

TEST(weak_ptr, a_copied_object_does_not_take_the_weak_pointers) {
    auto original = std::make_unique<node>(1);
    auto w = original->weak_from_this();
    node copy = *original;
    auto wc = copy.weak_from_this();
    EXPECT_EQ(w.get(), original.get());
    original.reset();
    EXPECT_FALSE(w);
    EXPECT_EQ(wc.get(), &copy);
}
