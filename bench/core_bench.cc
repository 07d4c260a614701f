// shoal-bench-core: the cost of core's building blocks in nanoseconds per operation.
//
//   shoal-bench-core [--smp 2] [--cpuset 0,1] [--poll-mode] [--min-time-ms 200]
//                    [--repetitions 5] [--filter SUBSTRING] [--json] [--iterations N]
//
// Every benchmark runs on shard 0 (submit_to goes to shard 1). The iteration count of each is
// grown until one run lasts --min-time-ms; then --repetitions runs are timed and the median,
// min and max ns/op reported, as a table or, with --json, as JSON on stdout. --iterations fixes
// the count instead (for instruction counts under valgrind: run twice with different counts and
// divide the difference).
#include "core/abort_source.hh"
#include "core/app.hh"
#include "core/foreign_ptr.hh"
#include "core/future_util.hh"
#include "core/metrics.hh"
#include "core/preempt.hh"
#include "core/reactor.hh"
#include "core/scheduling.hh"
#include "core/smp.hh"
#include "core/thread.hh"
#include "core/timer.hh"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

using namespace shoal;

namespace {

/// Keeps the compiler from optimising a value away.
template <typename T>
inline void keep(const T& value) {
    asm volatile("" : : "r,m"(value) : "memory");
}

/// Hides a value's origin from the compiler, so loops cannot be folded or vectorised.
inline uint64_t opaque(uint64_t v) {
    asm volatile("" : "+r"(v));
    return v;
}

/// A task that resolves a promise when the reactor runs it; reused, so it allocates nothing.
struct resolver final : task {
    promise<int> pr;
    int value = 0;
    void run_and_dispose() noexcept override { pr.set_value(value); }
};

using bench_fn = std::function<future<>(uint64_t iterations)>;

struct benchmark {
    std::string name;
    std::string description;
    bench_fn run;
    bool needs_two_shards = false;
};

struct result {
    std::string name;
    std::string description;
    bool skipped = false;
    uint64_t iterations = 0;
    double median = 0;
    double min = 0;
    double max = 0;
};

// --- the benchmarks -------------------------------------------------------------------------

future<> then_ready(uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) {
        auto f = make_ready_future<uint64_t>(opaque(i)).then([](uint64_t x) { return x + 1; });
        keep(f.get());
    }
    return make_ready_future<>();
}

future<> then_pending(uint64_t n) {
    // Chains of pending continuations: each link is allocated when attached, then scheduled,
    // run and freed when the value flows through it.
    constexpr uint64_t chain = 1000;
    uint64_t sum = 0;
    for (uint64_t done = 0; done < n; done += chain) {
        uint64_t k = std::min(chain, n - done);
        promise<uint64_t> p;
        future<uint64_t> f = p.get_future();
        for (uint64_t i = 0; i < k; ++i) {
            f = std::move(f).then([](uint64_t x) { return x + 1; });
        }
        p.set_value(0);
        sum += co_await std::move(f);
    }
    keep(sum);
}

future<> co_await_ready(uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) {
        keep(co_await make_ready_future<uint64_t>(opaque(i)));
    }
}

future<> co_await_pending(uint64_t n) {
    // Each await suspends; a task from the reactor's queue resolves the promise, which queues
    // the coroutine again: two trips through the task queue per await.
    resolver r;
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; ++i) {
        r.pr = promise<int>();
        r.value = int(i);
        auto f = r.pr.get_future();
        schedule(&r);
        sum += uint64_t(co_await std::move(f));
    }
    keep(sum);
}

future<> fiber_switch(uint64_t n) {
    return async([n] {
        for (uint64_t i = 0; i < n; ++i) {
            thread::yield();
        }
    });
}

future<> fiber_get_pending(uint64_t n) {
    return async([n] {
        resolver r;
        uint64_t sum = 0;
        for (uint64_t i = 0; i < n; ++i) {
            r.pr = promise<int>();
            r.value = int(i);
            auto f = r.pr.get_future();
            schedule(&r);
            sum += uint64_t(f.get());
        }
        keep(sum);
    });
}

future<> submit_to_roundtrip(uint64_t n) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; ++i) {
        sum += co_await submit_to(1, [i] { return i; });
    }
    keep(sum);
}

future<> submit_to_pipelined(uint64_t n) {
    // 64 calls in flight at a time: the queues carry them in batches.
    constexpr uint64_t window = 64;
    uint64_t sum = 0;
    std::vector<future<uint64_t>> fs;
    fs.reserve(window);
    for (uint64_t done = 0; done < n; done += window) {
        uint64_t k = std::min(window, n - done);
        fs.clear();
        for (uint64_t i = 0; i < k; ++i) {
            fs.push_back(submit_to(1, [i] { return i; }));
        }
        for (auto& f : fs) {
            sum += co_await std::move(f);
        }
    }
    keep(sum);
}

future<> io_nop(uint64_t n) {
    // One io_uring NOP at a time: queue the SQE, the loop's kernel entry submits it (it completes
    // inline), the CQE resolves the promise, the coroutine resumes.
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; ++i) {
        auto prep = [](io_uring_sqe* sqe) { io_uring_prep_nop(sqe); };
        sum += uint64_t(co_await local_reactor().submit_io(prep));
    }
    keep(sum);
}

future<> io_timeouts_x8(uint64_t n) {
    // Eight chains of zero-length io_uring timeouts: completions arrive from the kernel's timer
    // while other chains have SQEs waiting, so a loop both submits and reaps. With
    // DEFER_TASKRUN that is one io_uring_enter; without it, often two (compare with
    // --no-defer-taskrun).
    auto chain = [](uint64_t count) -> future<> {
        for (uint64_t i = 0; i < count; ++i) {
            __kernel_timespec ts{0, 0};
            auto prep = [&ts](io_uring_sqe* sqe) { io_uring_prep_timeout(sqe, &ts, 0, 0); };
            keep(co_await local_reactor().submit_io(prep));
        }
    };
    std::vector<future<>> chains;
    for (uint64_t c = 0; c < 8; ++c) {
        chains.push_back(chain(n / 8 + (c < n % 8 ? 1 : 0)));
    }
    co_await when_all_succeed(std::move(chains));
}

future<> timer_arm_fire(uint64_t n) {
    // One timer re-armed for "now": it expires at the reactor's next timer poll.
    promise<> current;
    timer<> t([&current] { current.set_value(); });
    for (uint64_t i = 0; i < n; ++i) {
        current = promise<>();
        auto f = current.get_future();
        t.arm(steady_clock_type::now());
        co_await std::move(f);
    }
}

future<> sleep_zero(uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) {
        co_await sleep(std::chrono::nanoseconds(0));
    }
}

future<> need_preempt_check(uint64_t n) {
    // The check long loops make every iteration: one load of a shard-local flag.
    uint64_t raised = 0;
    for (uint64_t i = 0; i < n; ++i) {
        raised += need_preempt() ? 1 : opaque(0);
    }
    keep(raised);
    return make_ready_future<>();
}

future<> abort_source_subscribe(uint64_t n) {
    // What a cancellable operation pays when it finishes first: subscribe, then unsubscribe.
    abort_source as;
    for (uint64_t i = 0; i < n; ++i) {
        auto sub = as.subscribe([](const std::exception_ptr&) {});
        keep(bool(sub));
    }
    return make_ready_future<>();
}

future<> abort_source_abort(uint64_t n) {
    // A source with one subscriber, aborted: the callback runs once.
    uint64_t called = 0;
    for (uint64_t i = 0; i < n; ++i) {
        abort_source as;
        auto sub = as.subscribe([&called](const std::exception_ptr&) { ++called; });
        as.request_abort_ex(std::exception_ptr());
    }
    keep(called);
    return make_ready_future<>();
}

future<> foreign_ptr_drop_remote(uint64_t n) {
    // An object made on shard 1 and dropped on shard 0: the pointer travels home with
    // submit_to and is freed there (time per object, 64 drops in flight).
    constexpr uint64_t batch = 64;
    for (uint64_t done = 0; done < n; done += batch) {
        uint64_t k = std::min(batch, n - done);
        auto made = co_await submit_to(1, [k] {
            std::vector<foreign_ptr<std::unique_ptr<uint64_t>>> v;
            v.reserve(k);
            for (uint64_t i = 0; i < k; ++i) {
                v.push_back(make_foreign(std::make_unique<uint64_t>(i)));
            }
            return v;
        });
        made.clear(); // k frees sent home
    }
}

future<> sched_group_switch(uint64_t n) {
    // Two groups with tasks: each yield goes to its own group's queue and the reactor picks the
    // group that had the least CPU per share (two clock reads per pick).
    static scheduling_group other = create_scheduling_group("bench", 1000);
    bool stop = false;
    auto spinner = [](const bool& stop) -> future<> {
        while (!stop) {
            co_await yield();
        }
    };
    auto background = with_scheduling_group(other, [&] { return spinner(stop); });
    for (uint64_t i = 0; i < n; ++i) {
        co_await yield();
    }
    stop = true;
    co_await std::move(background);
}

future<> histogram_observe(uint64_t n) {
    // Latency-like samples (1 us .. 1 s, log-uniform, prepared beforehand) into the 20 buckets of
    // an exponential histogram.
    static metrics::histogram h = metrics::histogram::exponential(1e-6, 2, 20);
    static const std::vector<double> samples = [] {
        std::vector<double> v(4096);
        uint64_t x = 88172645463325252ull;
        for (double& d : v) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17; // xorshift64
            d = 1e-6 * std::exp2(double(x % 20000) / 1000.0);
        }
        return v;
    }();
    for (uint64_t i = 0; i < n; ++i) {
        h.observe(samples[opaque(i) & 4095]);
    }
    keep(h.count());
    return make_ready_future<>();
}

std::vector<benchmark> all_benchmarks() {
    return {
        {"then_ready", "then() on a ready future (runs inline, no allocation)", then_ready},
        {"then_pending", "then() on a pending future: allocate, schedule, run, free", then_pending},
        {"co_await_ready", "co_await of a ready future (no suspension)", co_await_ready},
        {"co_await_pending", "co_await of a pending future resolved from the task queue", co_await_pending},
        {"fiber_switch", "fiber thread::yield(): switch to the reactor and back", fiber_switch},
        {"fiber_get_pending", "fiber get() of a pending future resolved from the task queue",
         fiber_get_pending},
        {"submit_to_roundtrip", "submit_to(1, fn) round trip, one call at a time", submit_to_roundtrip, true},
        {"submit_to_pipelined", "submit_to(1, fn) with 64 calls in flight (per call)", submit_to_pipelined,
         true},
        {"io_nop", "io_uring NOP submitted and completed through the reactor loop, one at a time", io_nop},
        {"io_timeouts_x8", "io_uring zero timeouts, 8 chains in flight (per timeout)", io_timeouts_x8},
        {"timer_arm_fire", "timer<> armed for now, fired by the reactor, coroutine resumed", timer_arm_fire},
        {"sleep_zero", "sleep(0): allocate a timer, fire it, resume", sleep_zero},
        {"need_preempt", "need_preempt() check in a loop", need_preempt_check},
        {"abort_subscribe", "abort_source subscribe + unsubscribe (operation finished first)",
         abort_source_subscribe},
        {"abort_request", "abort_source with one subscriber aborted", abort_source_abort},
        {"foreign_ptr_drop", "foreign_ptr made on shard 1, dropped on shard 0, freed at home (per object)",
         foreign_ptr_drop_remote, true},
        {"histogram_observe", "metrics::histogram::observe() with 20 buckets (per sample)",
         histogram_observe},
        {"sched_group_yield", "yield() while another scheduling group has tasks (per yield, both groups)",
         sched_group_switch},
    };
}

// --- the harness ----------------------------------------------------------------------------

/// Whether shard 0's ring ran with DEFER_TASKRUN (recorded during the run, printed after).
bool g_defers_taskrun = false;

struct settings {
    std::chrono::milliseconds min_time{200};
    unsigned repetitions = 5;
    uint64_t iterations = 0; // fixed count per run; 0: grown to min_time
    std::string filter;
};

future<double> time_run(const bench_fn& fn, uint64_t n) {
    auto start = steady_clock_type::now();
    co_await fn(n);
    auto elapsed = steady_clock_type::now() - start;
    co_return double(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
}

future<result> measure(const benchmark& b, const settings& s) {
    result r{b.name, b.description};
    if (b.needs_two_shards && shard_count() < 2) {
        r.skipped = true;
        co_return r;
    }
    const double target = double(std::chrono::duration_cast<std::chrono::nanoseconds>(s.min_time).count());
    uint64_t n = 1000;
    co_await time_run(b.run, n); // warm up
    if (s.iterations) {
        n = s.iterations;
    }
    while (!s.iterations) {
        double ns = co_await time_run(b.run, n);
        if (ns >= target || n >= (uint64_t(1) << 40)) {
            break;
        }
        double grow = ns > 0 ? target * 1.2 / ns : 10;
        n = uint64_t(double(n) * std::clamp(grow, 2.0, 10.0));
    }
    std::vector<double> per_op;
    for (unsigned i = 0; i < s.repetitions; ++i) {
        per_op.push_back(co_await time_run(b.run, n) / double(n));
    }
    std::sort(per_op.begin(), per_op.end());
    r.iterations = n;
    r.median = per_op[per_op.size() / 2];
    r.min = per_op.front();
    r.max = per_op.back();
    co_return r;
}

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) {
            auto colon = line.find(':');
            return colon == std::string::npos ? line : line.substr(colon + 2);
        }
    }
    return "unknown";
}

std::string kernel() {
    utsname u{};
    ::uname(&u);
    return std::string(u.sysname) + " " + u.release;
}

std::string json_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
        }
        out += c;
    }
    return out;
}

void print_table(const std::vector<result>& results, const smp_options& opts, const settings& s) {
    fmt::print("shoal-bench-core: {} shard(s), {} mode, {} ms per run, median of {} runs, io_uring {}\n",
               opts.smp, opts.reactor.poll_mode ? "poll" : "default (idle sleep)", s.min_time.count(),
               s.repetitions, g_defers_taskrun ? "DEFER_TASKRUN" : "COOP_TASKRUN (fallback)");
    fmt::print("cpu: {} x{}, {}\n\n", cpu_model(), ::sysconf(_SC_NPROCESSORS_ONLN), kernel());
    fmt::print("{:<22} {:>10} {:>10} {:>10} {:>12}  {}\n", "benchmark", "ns/op", "min", "max", "iterations",
               "what");
    for (const auto& r : results) {
        if (r.skipped) {
            fmt::print("{:<22} {:>10} {:>10} {:>10} {:>12}  {}\n", r.name, "-", "-", "-", "-",
                       "skipped: needs --smp 2");
            continue;
        }
        fmt::print("{:<22} {:>10.1f} {:>10.1f} {:>10.1f} {:>12}  {}\n", r.name, r.median, r.min, r.max,
                   r.iterations, r.description);
    }
}

void print_json(const std::vector<result>& results, const smp_options& opts, const settings& s) {
    fmt::print("{{\n");
    fmt::print("  \"benchmark\": \"shoal-bench-core\",\n");
    fmt::print("  \"machine\": {{\"cpu\": \"{}\", \"cpus_online\": {}, \"kernel\": \"{}\"}},\n",
               json_escape(cpu_model()), ::sysconf(_SC_NPROCESSORS_ONLN), json_escape(kernel()));
    fmt::print("  \"options\": {{\"smp\": {}, \"poll_mode\": {}, \"idle_poll_us\": {}, \"min_time_ms\": {}, "
               "\"repetitions\": {}, \"defer_taskrun\": {}}},\n",
               opts.smp, opts.reactor.poll_mode ? "true" : "false", opts.reactor.idle_poll.count(),
               s.min_time.count(), s.repetitions, g_defers_taskrun ? "true" : "false");
    fmt::print("  \"unit\": \"ns/op\",\n");
    fmt::print("  \"results\": [\n");
    for (size_t i = 0; i < results.size(); ++i) {
        const auto& r = results[i];
        std::string sep = i + 1 < results.size() ? "," : "";
        if (r.skipped) {
            fmt::print("    {{\"name\": \"{}\", \"skipped\": \"needs --smp 2\"}}{}\n", r.name, sep);
            continue;
        }
        fmt::print("    {{\"name\": \"{}\", \"ns_per_op\": {:.2f}, \"ns_min\": {:.2f}, \"ns_max\": {:.2f}, "
                   "\"iterations\": {}, \"description\": \"{}\"}}{}\n",
                   r.name, r.median, r.min, r.max, r.iterations, json_escape(r.description), sep);
    }
    fmt::print("  ]\n}}\n");
}

} // namespace

int main(int argc, char** argv) {
    app a("shoal-bench-core", "ns per operation of core's futures, coroutines, fibers, smp and timers");
    a.add_option("smp", "number of shards (submit_to benchmarks need 2)", "2");
    a.add_option("min-time-ms", "grow each benchmark's iteration count until a run lasts this long", "200");
    a.add_option("repetitions", "timed runs per benchmark (the median is reported)", "5");
    a.add_option("filter", "only benchmarks whose name contains this");
    a.add_flag("json", "print JSON instead of the table");
    a.add_option("iterations", "fixed iterations per timed run (0: grow to --min-time-ms)", "0");
    if (auto rc = a.parse(argc, argv)) {
        return *rc;
    }
    settings s;
    s.min_time = std::chrono::milliseconds(a.get_size("min-time-ms"));
    s.repetitions = std::max<unsigned>(1, unsigned(a.get_size("repetitions")));
    s.iterations = a.get_size("iterations");
    s.filter = a.get("filter");
    bool json = a.has("json");
    smp_options opts = a.engine_options();
    opts.handle_signals = true;
    std::vector<result> results;
    int rc = 0;
    try {
        rc = run_shards(opts, [&]() -> future<int> {
            g_defers_taskrun = local_reactor().defers_taskrun();
            for (const auto& b : all_benchmarks()) {
                if (!s.filter.empty() && b.name.find(s.filter) == std::string::npos) {
                    continue;
                }
                results.push_back(co_await measure(b, s));
            }
            co_return 0;
        });
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shoal-bench-core: %s\n", e.what());
        return 1;
    }
    if (rc != 0) {
        return rc;
    }
    if (json) {
        print_json(results, opts, s);
    } else {
        print_table(results, opts, s);
    }
    return 0;
}
