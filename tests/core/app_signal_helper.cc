// A shoal::app that core_app_test starts as a child process and stops with a signal. It prints
// "ready" once it has work in flight on every shard, then waits for the signal.
//
//   core_app_signal_helper [app options] wait    main waits for stop_requested(), stops its
//                                                workers (each shard drains its gate) and
//                                                returns 0; every worker prints its counts.
//   core_app_signal_helper [app options] abrupt  main never finishes: the signal stops the shards
//                                                directly; afterwards prints how many queued tasks
//                                                were scheduled and how many ran.
//   core_app_signal_helper [app options] exit N  main returns N at once.
#include "core/app.hh"
#include "core/future_util.hh"
#include "core/gate.hh"
#include "core/sharded.hh"
#include "core/timer.hh"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <unistd.h>

using namespace shoal;
using namespace std::chrono_literals;

namespace {

/// One write per line, so lines from different shards do not interleave.
void say(const std::string& line) {
    std::string l = line + "\n";
    (void)!::write(1, l.data(), l.size());
}

/// Keeps operations in flight on its shard (a timer, then a call to the next shard) until
/// stopped; stop() closes the gate and waits for the ones in flight.
class worker {
public:
    void start() { _loop.emplace(run()); }
    future<> stop() {
        _running = false;
        if (_loop) {
            co_await std::move(*_loop);
        }
        co_await _gate.close();
        say(fmt::format("shard {} started={} completed={}", this_shard_id(), _started, _completed));
    }
    uint64_t completed() const { return _completed; }
    uint64_t in_flight() const { return _started - _completed; }

private:
    future<> run() {
        while (_running) {
            auto h = _gate.hold();
            ++_started;
            (void)operation().finally([this, h = std::move(h)] { ++_completed; });
            co_await sleep(200us);
        }
    }
    future<> operation() {
        co_await sleep(std::chrono::microseconds(500 + _started % 1500));
        unsigned next = (this_shard_id() + 1) % shard_count();
        co_await submit_to(next, [] { return sleep(300us); });
    }

    gate _gate;
    bool _running = true;
    uint64_t _started = 0;
    uint64_t _completed = 0;
    std::optional<future<>> _loop;
};

future<int> wait_mode() {
    sharded<worker> workers;
    co_await workers.start();
    co_await workers.invoke_on_all([](worker& w) { w.start(); });
    // Every shard has completed some operations before the signal may come.
    for (;;) {
        auto least = co_await workers.map_reduce([](worker& w) { return w.completed(); }, UINT64_MAX,
                                                 [](uint64_t a, uint64_t b) { return std::min(a, b); });
        if (least >= 5) {
            break;
        }
        co_await sleep(1ms);
    }
    say("ready");
    co_await stop_requested();
    auto in_flight = co_await workers.map_reduce([](worker& w) { return w.in_flight(); }, uint64_t(0),
                                                 [](uint64_t a, uint64_t b) { return a + b; });
    say(fmt::format("stop requested with {} operations in flight", in_flight));
    co_await workers.stop();
    say("stopped");
    co_return 0;
}

// --- abrupt mode: state reachable from globals on purpose (main is abandoned, not leaked) ---

std::atomic<long> g_scheduled{0};
std::atomic<long> g_ran{0};
promise<int>* g_never = nullptr;
timer<>* g_timers[256]; // a plain array: no destructor runs at exit

/// A queued unit of work: counts itself when the reactor runs it.
struct counted_task final : task {
    void run_and_dispose() noexcept override {
        ++g_ran;
        delete this;
    }
};

future<int> abrupt_mode() {
    g_never = new promise<int>();
    co_await invoke_on_all_shards([] {
        // Every millisecond, queue a burst of tasks: some are queued when the signal lands.
        auto* t = new timer<>([] {
            for (int i = 0; i < 50; ++i) {
                ++g_scheduled;
                schedule(new counted_task());
            }
        });
        t->arm_periodic(1ms);
        g_timers[this_shard_id() % 256] = t;
        return make_ready_future<>();
    });
    co_await sleep(5ms);
    say("ready");
    co_return co_await g_never->get_future(); // never resolves
}

} // namespace

int main(int argc, char** argv) {
    app a("core_app_signal_helper", "a child process for the signal tests of core_app_test");
    std::string mode;
    int rc = a.run(argc, argv, [&a, &mode]() -> future<int> {
        const auto& args = a.positional();
        mode = args.empty() ? "wait" : args[0];
        if (mode == "exit") {
            return make_ready_future<int>(args.size() > 1 ? std::stoi(args[1]) : 0);
        }
        if (mode == "abrupt") {
            return abrupt_mode();
        }
        return wait_mode();
    });
    if (mode == "abrupt") {
        say(fmt::format("scheduled={} ran={}", g_scheduled.load(), g_ran.load()));
    }
    say(fmt::format("exit {}", rc));
    return rc;
}
