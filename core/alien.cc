#include "core/alien.hh"

#include "core/gate.hh"
#include "core/log.hh"
#include "core/reactor.hh"

#include <atomic>
#include <mutex>
#include <pthread.h>
#include <string>

namespace shoal::alien {

namespace {
logger alien_log("alien");
thread_local bool tl_engine_thread = false;
} // namespace

bool on_engine_thread() noexcept {
    return tl_engine_thread;
}

namespace internal {

/// One shard's queue of work from alien threads, drained by a poller on that shard. A producer
/// that finds the queue empty writes the shard's wake-up eventfd, so the shard never sleeps
/// with work queued (whatever point of its loop it was at) and a busy producer costs one write
/// per batch the shard drains, not one per item.
class inbox final : public poller {
public:
    /// Queues `w`; false when closed.
    bool push(std::unique_ptr<work>& w) {
        bool was_empty;
        {
            std::lock_guard lock(_mutex);
            if (_closed) {
                return false;
            }
            was_empty = _queued.empty();
            _queued.push_back(std::move(w));
            _has_work.store(true, std::memory_order_release);
        }
        if (was_empty) {
            _reactor->wake_unconditionally();
        }
        return true;
    }

    /// Called on the shard: starts polling.
    void attach() {
        _reactor = &local_reactor();
        _reactor->register_poller(this);
    }

    /// Called on the shard: refuses further work, runs what is queued, stops polling and
    /// resolves once every piece of work it ran is done.
    future<> close() {
        {
            std::lock_guard lock(_mutex);
            _closed = true;
        }
        poll();
        _reactor->unregister_poller(this);
        return _in_flight.close();
    }

    /// Work queued when the engine ended without running it (a shard that never started).
    void cancel_all() noexcept {
        std::lock_guard lock(_mutex);
        _closed = true;
        for (auto& w : _queued) {
            w->cancel();
        }
        _queued.clear();
    }

    bool poll() override {
        if (!_has_work.load(std::memory_order_acquire)) {
            return false;
        }
        {
            std::lock_guard lock(_mutex);
            _draining.swap(_queued);
            _has_work.store(false, std::memory_order_relaxed);
        }
        for (auto& w : _draining) {
            // The work object lives until its future resolves: a coroutine lambda's captures
            // stay valid while it is suspended.
            _in_flight.enter();
            auto done = w->run();
            (void)done.finally([this, w = std::move(w)] { _in_flight.leave(); });
        }
        _draining.clear();
        return true;
    }
    bool try_arm() override { return !_has_work.load(std::memory_order_acquire); }
    void disarm() override {}

private:
    std::mutex _mutex;
    std::vector<std::unique_ptr<work>> _queued;
    std::vector<std::unique_ptr<work>> _draining; // only the shard touches it
    std::atomic<bool> _has_work{false};
    bool _closed = false;
    reactor* _reactor = nullptr;
    gate _in_flight; // work that ran and is not done yet (shard-local)
};

} // namespace internal

engine::engine(smp_options opts) {
    opts.handle_signals = false;
    if (opts.smp == 0) {
        opts.smp = unsigned(opts.cpuset.empty() ? allowed_cpus().size() : opts.cpuset.size());
    }
    _shards = opts.smp;
    for (unsigned i = 0; i < _shards; ++i) {
        _inboxes.push_back(std::make_unique<internal::inbox>());
    }
    std::promise<void> started;
    auto started_future = started.get_future();
    _thread = std::thread([this, opts, &started]() mutable {
        std::promise<void>* ready = &started;
        try {
            run_shards(opts, [this, &ready]() -> future<int> {
                // Stopping is work like any other: `stop()` posts it to shard 0.
                auto stop_requested = std::make_shared<promise<>>();
                auto stopped = stop_requested->get_future();
                co_await invoke_on_all_shards([this] {
                    auto name = "shoal-shard-" + std::to_string(this_shard_id());
                    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
                    tl_engine_thread = true;
                    _inboxes[this_shard_id()]->attach();
                    return make_ready_future<>();
                });
                _stop_signal = [stop_requested] { stop_requested->set_value(); };
                ready->set_value();
                ready = nullptr;
                co_await std::move(stopped);
                co_await invoke_on_all_shards([this] { return _inboxes[this_shard_id()]->close(); });
                co_return 0;
            });
        } catch (...) {
            if (ready) {
                ready->set_exception(std::current_exception());
                ready = nullptr;
            } else {
                alien_log.error("the engine ended with an error: {}", std::current_exception());
            }
        }
        if (ready) {
            ready->set_exception(
                std::make_exception_ptr(std::runtime_error("the shoal engine ended while starting")));
        }
        for (auto& in : _inboxes) {
            in->cancel_all();
        }
    });
    try {
        started_future.get();
    } catch (...) {
        _thread.join();
        _stopped.store(true);
        throw;
    }
}

engine::~engine() {
    stop();
}

bool engine::running() const noexcept {
    return !_stopped.load(std::memory_order_acquire);
}

bool engine::queue(unsigned shard, std::unique_ptr<internal::work> w) {
    if (shard >= _shards || !_inboxes[shard]->push(w)) {
        if (w) {
            w->cancel();
        }
        return false;
    }
    return true;
}

void engine::stop() {
    if (_stopped.exchange(true)) {
        return;
    }
    // The stop itself travels through shard 0's inbox, behind the work already queued there.
    bool queued = post(0, [this] { _stop_signal(); });
    if (!queued) {
        alien_log.warn("the engine was already closing");
    }
    _thread.join();
}

} // namespace shoal::alien
