#include "core/smp.hh"

#include "core/cpu_claim.hh"
#include "core/future_util.hh"
#include "core/log.hh"
#include "core/spsc_queue.hh"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>

#include <pthread.h>
#include <sched.h>
#include <sys/signalfd.h>
#include <unistd.h>

namespace shoal {

namespace {

logger smp_log("smp");
thread_local unsigned tl_shard_id = 0;

/// The two queues between an ordered pair of shards (source → target): requests travel one
/// way, the same messages come back as replies. Each side keeps a local backlog so a push never
/// blocks and batches are published once per poll. At most `smp_max_in_flight` calls of the pair
/// are between submission and completion, so neither ring can overflow: a backlog is always
/// published whole by the next poll. Calls beyond that wait in `waiting_head..waiting_tail`.
struct channel {
    static constexpr size_t ring_size = 256;
    static_assert(smp_max_in_flight <= ring_size, "the in-flight bound keeps the rings from filling");
    spsc_queue<internal::smp_message*, ring_size> requests;
    spsc_queue<internal::smp_message*, ring_size> replies;
    std::vector<internal::smp_message*> pending_requests; // touched by the source only
    std::vector<internal::smp_message*> pending_replies;  // touched by the target only
    unsigned in_flight = 0;                               // source only: submitted, not completed
    unsigned waiting = 0;                                 // source only: calls waiting for a place
    uint64_t sent = 0;                                    // source only: calls submitted
    uint64_t received = 0;                                // target only: calls run
    internal::smp_message* waiting_head = nullptr;        // source only: calls waiting for a place
    internal::smp_message* waiting_tail = nullptr;

    /// Source: sends `m` now if the pair has room, else queues it behind the other waiters.
    void submit(internal::smp_message* m) {
        ++sent;
        if (in_flight < smp_max_in_flight && !waiting_head) {
            ++in_flight;
            pending_requests.push_back(m);
            return;
        }
        ++waiting;
        if (waiting_tail) {
            waiting_tail->_next_waiting = m;
            waiting_tail = m;
        } else {
            waiting_head = waiting_tail = m;
        }
    }
    /// Source: one call completed; the first waiting call takes its place.
    void completed() {
        --in_flight;
        if (internal::smp_message* m = waiting_head) {
            waiting_head = std::exchange(m->_next_waiting, nullptr);
            if (!waiting_head) {
                waiting_tail = nullptr;
            }
            --waiting;
            ++in_flight;
            pending_requests.push_back(m);
        }
    }
};

class engine;
engine* g_engine = nullptr;
unsigned g_shard_count = 1;

/// Polls the channels that end on its shard: incoming requests, returning replies, and
/// publishes the shard's backlogs.
class smp_poller final : public poller {
public:
    smp_poller(engine& e, unsigned shard)
        : _e(e)
        , _shard(shard) {}
    bool poll() override;
    bool try_arm() override { return !has_incoming(); }
    void disarm() override {}
    bool has_incoming() const noexcept;

private:
    bool flush();
    engine& _e;
    unsigned _shard;
};

class engine {
public:
    explicit engine(const smp_options& opts)
        : _opts(opts)
        , _n(opts.smp) {
        _channels.resize(size_t(_n) * _n);
        for (auto& c : _channels) {
            c = std::make_unique<channel>();
        }
        _reactors.resize(_n, nullptr);
    }

    engine(const engine&) = delete;
    engine& operator=(const engine&) = delete;

    channel& chan(unsigned from, unsigned to) { return *_channels[size_t(from) * _n + to]; }
    unsigned size() const noexcept { return _n; }
    reactor& reactor_of(unsigned shard) { return *_reactors[shard]; }
    const smp_options& options() const noexcept { return _opts; }

    /// Runs shard `id`'s reactor on the calling thread until it is stopped. If this shard's
    /// reactor cannot be created, or another shard fails to start, returns without running.
    void run_shard(unsigned id, const std::function<void()>& on_start) {
        std::unique_ptr<reactor> owned;
        try {
            owned = std::make_unique<reactor>(id, _opts.reactor);
        } catch (...) {
            abort_start(std::current_exception());
            return;
        }
        reactor& r = *owned;
        tl_shard_id = id;
        internal::set_local_reactor(&r);
        smp_poller sp(*this, id);
        // A single shard has no peer to exchange messages with: its loop polls no queues.
        const bool has_peers = _n > 1;
        if (has_peers) {
            r.register_poller(&sp);
            r.set_pending_work_check([&sp] { return sp.has_incoming(); });
        }
        _reactors[id] = &r;
        _started.fetch_add(1, std::memory_order_acq_rel);
        while (_started.load(std::memory_order_acquire) < _n) {
            if (_start_aborted.load(std::memory_order_acquire)) {
                // Another shard could not start: leave without running anything.
                if (has_peers) {
                    r.unregister_poller(&sp);
                }
                internal::set_local_reactor(nullptr);
                tl_shard_id = 0;
                return;
            }
            std::this_thread::yield();
        }
        if (on_start) {
            on_start();
        }
        r.run();
        // Every shard has stopped taking cross-shard work before any reactor goes away.
        _stopped.fetch_add(1, std::memory_order_acq_rel);
        while (_stopped.load(std::memory_order_acquire) < _n) {
            sp.poll();
            std::this_thread::yield();
        }
        // A shard may have published messages right before it stopped (replies to calls made
        // just before the stop, such as the stop requests themselves) after this one's last
        // poll: take them, and the replies they produce, before any reactor goes away.
        sp.poll();
        _drained.fetch_add(1, std::memory_order_acq_rel);
        while (_drained.load(std::memory_order_acquire) < _n) {
            sp.poll();
            std::this_thread::yield();
        }
        sp.poll();
        if (has_peers) {
            r.unregister_poller(&sp);
        }
        _finished.fetch_add(1, std::memory_order_acq_rel);
        while (_finished.load(std::memory_order_acquire) < _n) {
            std::this_thread::yield();
        }
        internal::set_local_reactor(nullptr);
        tl_shard_id = 0;
    }

    /// Records why the engine cannot start and releases the shards already waiting for the
    /// others; `run_shards` rethrows the first error.
    void abort_start(std::exception_ptr ex) noexcept {
        std::lock_guard g(_start_error_lock);
        if (!_start_error) {
            _start_error = ex;
        }
        _start_aborted.store(true, std::memory_order_release);
    }
    std::exception_ptr start_error() {
        std::lock_guard g(_start_error_lock);
        return _start_error;
    }

    int exit_code = 0;
    int signal_exit_code = 0;
    std::vector<promise<>> stop_waiters;
    bool stop_requested = false;
    bool main_done = false;

private:
    smp_options _opts;
    unsigned _n;
    std::vector<std::unique_ptr<channel>> _channels;
    std::vector<reactor*> _reactors;
    std::atomic<unsigned> _started{0};
    std::atomic<bool> _start_aborted{false};
    std::mutex _start_error_lock;
    std::exception_ptr _start_error;
    std::atomic<unsigned> _stopped{0};
    std::atomic<unsigned> _drained{0};
    std::atomic<unsigned> _finished{0};
};

bool smp_poller::has_incoming() const noexcept {
    for (unsigned peer = 0; peer < _e.size(); ++peer) {
        if (peer == _shard) {
            continue;
        }
        auto& in = _e.chan(peer, _shard);
        auto& out = _e.chan(_shard, peer);
        if (!in.requests.empty() || !out.replies.empty()) {
            return true;
        }
        // This shard's own backlogs: never sleep holding messages a peer may be waiting for.
        if (!out.pending_requests.empty() || !in.pending_replies.empty()) {
            return true;
        }
    }
    return false;
}

bool smp_poller::flush() {
    bool any = false;
    for (unsigned peer = 0; peer < _e.size(); ++peer) {
        if (peer == _shard) {
            continue;
        }
        bool sent = false;
        auto& out = _e.chan(_shard, peer);
        if (!out.pending_requests.empty()) {
            size_t n = out.requests.push(out.pending_requests.data(), out.pending_requests.size());
            out.pending_requests.erase(out.pending_requests.begin(), out.pending_requests.begin() + n);
            sent |= n > 0;
        }
        auto& in = _e.chan(peer, _shard);
        if (!in.pending_replies.empty()) {
            size_t n = in.replies.push(in.pending_replies.data(), in.pending_replies.size());
            in.pending_replies.erase(in.pending_replies.begin(), in.pending_replies.begin() + n);
            sent |= n > 0;
        }
        if (sent) {
            _e.reactor_of(peer).notify_from_other_thread();
            any = true;
        }
        // Whatever did not fit is still work: the loop must come back to publish it.
        any |= !out.pending_requests.empty() || !in.pending_replies.empty();
    }
    return any;
}

bool smp_poller::poll() {
    bool work = false;
    internal::smp_message* batch[64];
    for (unsigned peer = 0; peer < _e.size(); ++peer) {
        if (peer == _shard) {
            continue;
        }
        size_t n;
        auto& in = _e.chan(peer, _shard);
        while ((n = in.requests.pop(batch, 64)) > 0) {
            work = true;
            in.received += n;
            for (size_t i = 0; i < n; ++i) {
                batch[i]->run_on_target();
            }
        }
        auto& out = _e.chan(_shard, peer);
        while ((n = out.replies.pop(batch, 64)) > 0) {
            work = true;
            for (size_t i = 0; i < n; ++i) {
                out.completed();
                batch[i]->complete_on_source();
            }
        }
    }
    work |= flush();
    return work;
}

/// Reads SIGINT/SIGTERM from a signalfd through shard 0's ring.
class signal_reader final : public io_completion {
public:
    signal_reader() {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        // Blocking fd on purpose: io_uring then waits for a signal instead of failing with EAGAIN.
        _fd = ::signalfd(-1, &set, SFD_CLOEXEC);
        if (_fd < 0) {
            throw std::system_error(errno, std::system_category(), "signalfd");
        }
        arm();
    }
    ~signal_reader() { ::close(_fd); }
    void arm() {
        io_uring_sqe* sqe = local_reactor().get_sqe();
        io_uring_prep_read(sqe, _fd, &_info, sizeof(_info), 0);
        io_uring_sqe_set_data(sqe, static_cast<io_completion*>(this));
        _pending = true;
    }
    void complete(int result, uint32_t) noexcept override {
        _pending = false;
        if (result == int(sizeof(_info))) {
            smp_log.info("received signal {}, stopping", int(_info.ssi_signo));
            g_engine->signal_exit_code = 128 + int(_info.ssi_signo);
            request_stop();
        }
        if (result != -ECANCELED && !local_reactor().stopping()) {
            arm();
        }
    }
    bool pending() const noexcept { return _pending; }

private:
    int _fd;
    signalfd_siginfo _info{};
    bool _pending = false;
};

/// Stops every shard: the others first, then shard 0.
void stop_all_shards() {
    for (unsigned s = 1; s < shard_count(); ++s) {
        (void)submit_to(s, [] { local_reactor().stop(); });
    }
    local_reactor().stop();
}

void pin_to(unsigned cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    if (rc != 0) {
        throw std::system_error(rc, std::system_category(),
                                "cannot pin a shard to CPU " + std::to_string(cpu));
    }
}

} // namespace

std::vector<unsigned> allowed_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    std::vector<unsigned> cpus;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        for (unsigned c = 0; c < CPU_SETSIZE; ++c) {
            if (CPU_ISSET(c, &set)) {
                cpus.push_back(c);
            }
        }
    }
    if (cpus.empty()) {
        unsigned n = std::max(1u, std::thread::hardware_concurrency());
        for (unsigned c = 0; c < n; ++c) {
            cpus.push_back(c);
        }
    }
    return cpus;
}

unsigned this_shard_id() noexcept {
    return tl_shard_id;
}

unsigned shard_count() noexcept {
    return g_shard_count;
}

void internal::smp_message::respond() noexcept {
    g_engine->chan(_source, _target).pending_replies.push_back(this);
}

smp_queue_stats smp_stats(unsigned peer) noexcept {
    smp_queue_stats s;
    if (!g_engine || peer == tl_shard_id || peer >= g_engine->size()) {
        return s;
    }
    const channel& out = g_engine->chan(tl_shard_id, peer);
    const channel& in = g_engine->chan(peer, tl_shard_id);
    s.calls_sent = out.sent;
    s.calls_received = in.received;
    s.in_flight = out.in_flight;
    s.waiting = out.waiting;
    s.backlog = out.pending_requests.size() + in.pending_replies.size();
    return s;
}

void internal::smp_submit(unsigned target, smp_message* m) noexcept {
    m->_source = tl_shard_id;
    m->_target = target;
    g_engine->chan(tl_shard_id, target).submit(m);
}

future<> stop_requested() {
    if (!g_engine) {
        return make_exception_future<>(std::logic_error("stop_requested() outside a running engine"));
    }
    if (g_engine->stop_requested) {
        return make_ready_future<>();
    }
    g_engine->stop_waiters.emplace_back();
    return g_engine->stop_waiters.back().get_future();
}

void request_stop() {
    engine& e = *g_engine;
    if (e.stop_requested) {
        return;
    }
    e.stop_requested = true;
    if (!e.stop_waiters.empty()) {
        for (auto& w : e.stop_waiters) {
            w.set_value();
        }
        e.stop_waiters.clear();
    } else if (!e.main_done) {
        smp_log.info("nothing waits for a stop request: stopping the shards");
        stop_all_shards();
    }
}

future<> invoke_on_all_shards(std::function<future<>()> func) {
    std::vector<future<>> results;
    results.reserve(shard_count());
    for (unsigned s = 0; s < shard_count(); ++s) {
        results.push_back(submit_to(s, [func] { return func(); }));
    }
    return when_all_succeed(std::move(results));
}

int run_shards(const smp_options& given, std::function<future<int>()> main) {
    if (g_engine) {
        throw std::logic_error("run_shards: an engine is already running in this process");
    }
    smp_options opts = given;
    auto cpus = opts.cpuset.empty() ? allowed_cpus() : opts.cpuset;
    if (opts.smp == 0) {
        opts.smp = unsigned(cpus.size());
    }
    // Default placement: CPUs no other shoal process holds. A shard left on a CPU that may be
    // shared does not spin when idle: spinning would steal the CPU from the other process.
    cpu_claims claims;
    if (opts.pin && opts.cpuset.empty()) {
        claims = cpu_claims::claim(cpus, opts.smp);
        cpus = claims.cpus();
        if (claims.shared()) {
            smp_log.warn("not enough CPUs free of other shoal processes for {} shards: sharing CPUs and "
                         "not polling when idle; choose CPUs with --cpuset (lock files in {})",
                         opts.smp, cpu_lock_dir());
            opts.reactor.idle_poll = std::chrono::microseconds(0);
        }
    }
    if (cpus.size() < opts.smp) {
        if (opts.pin && !given.cpuset.empty()) {
            throw std::invalid_argument("--cpuset names " + std::to_string(cpus.size()) + " CPUs for " +
                                        std::to_string(opts.smp) + " shards");
        }
        // More shards than CPUs: share CPUs round-robin.
        size_t available = cpus.size();
        for (size_t i = available; i < opts.smp; ++i) {
            cpus.push_back(cpus[i % available]);
        }
    }
    // Shard 0 is the calling thread: give it its CPUs back afterwards.
    cpu_set_t caller_cpus;
    bool restore_cpus =
        opts.pin && pthread_getaffinity_np(pthread_self(), sizeof(caller_cpus), &caller_cpus) == 0;
    // Signals go to the signalfd of shard 0 only: block them in every thread.
    sigset_t blocked, old;
    sigemptyset(&blocked);
    if (opts.handle_signals) {
        sigaddset(&blocked, SIGINT);
        sigaddset(&blocked, SIGTERM);
    }
    pthread_sigmask(SIG_BLOCK, &blocked, &old);

    engine e(opts);
    g_engine = &e;
    g_shard_count = opts.smp;
    std::vector<std::thread> threads;
    try {
        if (opts.pin) {
            pin_to(cpus[0]);
        }
        for (unsigned id = 1; id < opts.smp; ++id) {
            threads.emplace_back([&e, id, cpu = cpus[id], pin = opts.pin] {
                if (pin) {
                    try {
                        pin_to(cpu);
                    } catch (const std::exception& ex) {
                        smp_log.warn("{}", ex.what());
                    }
                }
                e.run_shard(id, {});
            });
        }
    } catch (...) {
        e.abort_start(std::current_exception());
    }
    std::unique_ptr<signal_reader> signals;
    if (!e.start_error()) {
        e.run_shard(0, [&] {
            if (opts.handle_signals) {
                signals = std::make_unique<signal_reader>();
            }
            // main runs as the shard's first task, under the time quota like every other one.
            (void)yield().then([&main] { return main(); }).then_wrapped([&e](future<int> f) {
                e.main_done = true;
                if (f.failed()) {
                    smp_log.error("main function failed: {}", f.get_exception());
                    e.exit_code = 1;
                } else {
                    e.exit_code = f.get();
                }
                stop_all_shards();
            });
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    if (signals && signals->pending()) {
        (void)signals.release(); // the ring is gone; the kernel no longer writes to it
    }
    signals.reset();
    g_engine = nullptr;
    g_shard_count = 1;
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (restore_cpus) {
        pthread_setaffinity_np(pthread_self(), sizeof(caller_cpus), &caller_cpus);
    }
    if (auto ex = e.start_error()) {
        std::rethrow_exception(ex);
    }
    // A main that never finished was cut short by a signal: report it like a shell would.
    return e.main_done ? e.exit_code : e.signal_exit_code;
}

} // namespace shoal
