// shoal-bench-call-cost: what a function call and its return cost next to the same work inlined,
// on the machine it runs on. Natively a call is a few cycles; in the Soft-RoCE guest (qemu TCG)
// every return is an indirect jump the emulator must look up, so a call costs as much as dozens
// of straight-line instructions. That is why the cached GET's path is measured in calls per GET
// as well as in instructions (bench/instructions_per_op.sh, docs/performance-history.md "Calls, not
// instructions").
//
//   shoal-bench-call-cost [ROUNDS]     (default 3000; prints P50 ns of each row)
//
// Each row runs 64 steps between two clock reads: distinct functions called directly, the same
// steps inlined, and the same functions called through a table of pointers.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

namespace {

constexpr int steps = 64;

/// One step of work; each `I` is a function of its own (its own code in the emulator's cache).
template <int I>
[[gnu::noinline]] int called(int x) noexcept {
    asm volatile("");
    return x * (I + 3) + I;
}

/// The same step, always inlined.
template <int I>
[[gnu::always_inline]] inline int inlined(int x) noexcept {
    asm volatile("");
    return x * (I + 3) + I;
}

template <int... I>
[[gnu::noinline]] int direct_calls(int x, std::integer_sequence<int, I...>) noexcept {
    ((x = called<I>(x)), ...);
    return x;
}

template <int... I>
[[gnu::noinline]] int inlined_steps(int x, std::integer_sequence<int, I...>) noexcept {
    ((x = inlined<I>(x)), ...);
    return x;
}

using step_fn = int (*)(int) noexcept;

template <int... I>
constexpr std::array<step_fn, steps> table_of(std::integer_sequence<int, I...>) noexcept {
    return {&called<I>...};
}

[[gnu::noinline]] int indirect_calls(int x, const std::array<step_fn, steps>& table) noexcept {
    for (step_fn f : table) {
        x = f(x);
    }
    return x;
}

uint64_t p50(std::vector<uint64_t>& v) {
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
    return v[v.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3000;
    using clock = std::chrono::steady_clock;
    const auto seq = std::make_integer_sequence<int, steps>();
    static const std::array<step_fn, steps> table = table_of(seq);
    std::vector<uint64_t> direct, inl, indirect, empty;
    volatile int sink = 0;
    int x = 1;
    auto ns = [](clock::time_point a, clock::time_point b) {
        return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
    };
    for (int r = 0; r < rounds; ++r) {
        auto t0 = clock::now();
        x = direct_calls(x, seq);
        auto t1 = clock::now();
        x = inlined_steps(x, seq);
        auto t2 = clock::now();
        x = indirect_calls(x, table);
        auto t3 = clock::now();
        auto t4 = clock::now();
        direct.push_back(ns(t0, t1));
        inl.push_back(ns(t1, t2));
        indirect.push_back(ns(t2, t3));
        empty.push_back(ns(t3, t4));
    }
    sink = x;
    (void)sink;
    const uint64_t base = p50(empty);
    const uint64_t d = p50(direct), i = p50(inl), t = p50(indirect);
    std::printf("P50 of %d rounds, %d steps each (ns, the clock read's %llu ns included):\n", rounds, steps,
                (unsigned long long)base);
    std::printf("  direct calls   %8llu  (%.1f ns per call beyond the inlined step)\n", (unsigned long long)d,
                d > i ? double(d - i) / steps : 0.0);
    std::printf("  inlined        %8llu\n", (unsigned long long)i);
    std::printf("  indirect calls %8llu  (%.1f ns per call beyond the inlined step)\n", (unsigned long long)t,
                t > i ? double(t - i) / steps : 0.0);
    return 0;
}
