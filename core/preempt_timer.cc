#include "core/preempt_timer.hh"

#include "core/log.hh"

#include <cerrno>
#include <cstring>
#include <system_error>

namespace shoal::internal {

namespace {
/// What `need_preempt()` reads off a shard or with no time quota: one word, never changed.
constinit unsigned still_word = 0;
logger preempt_log("preempt");
} // namespace

constinit thread_local preempt_words preempt_watch{&still_word, &still_word};

preempt_timer::preempt_timer(std::chrono::microseconds period)
    : _period(period) {
    if (period.count() <= 0) {
        return;
    }
    // COOP_TASKRUN: the expiry's completion is posted when the shard next returns to user space
    // (from the timer interrupt when it runs on the timer's CPU), with no inter-processor
    // interrupt when the timer fires on another CPU.
    int rc = io_uring_queue_init(2, &_ring, IORING_SETUP_COOP_TASKRUN);
    if (rc == -EINVAL) {
        rc = io_uring_queue_init(2, &_ring, 0); // kernels before 5.19
    }
    if (rc < 0) {
        throw std::system_error(-rc, std::system_category(), "io_uring_queue_init (preemption timer)");
    }
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(period).count();
    _period_ts.tv_sec = ns / 1'000'000'000;
    _period_ts.tv_nsec = ns % 1'000'000'000;
    _enabled = true;
}

preempt_timer::~preempt_timer() {
    if (_enabled) {
        io_uring_queue_exit(&_ring); // cancels an armed timeout
    }
}

preempt_words preempt_timer::words() const noexcept {
    if (!_enabled) {
        return still_words();
    }
    return {_ring.cq.khead, _ring.cq.ktail};
}

preempt_words preempt_timer::still_words() noexcept {
    return {&still_word, &still_word};
}

void preempt_timer::start() noexcept {
    io_uring_sqe* sqe = io_uring_get_sqe(&_ring);
    if (!sqe) {
        return; // cannot happen: at most one request is ever queued
    }
    io_uring_prep_timeout(sqe, &_period_ts, 0, 0);
    int rc = io_uring_submit(&_ring);
    if (rc != 1) {
        preempt_log.error("cannot arm the preemption timer: {}",
                          rc < 0 ? std::strerror(-rc) : "not submitted");
        return;
    }
    _armed_at = std::chrono::steady_clock::now();
    _armed = true;
}

void preempt_timer::take_expiry() noexcept {
    io_uring_cq_advance(&_ring, io_uring_cq_ready(&_ring));
    _armed = false;
}

bool preempt_timer::noticed_late() const noexcept {
    return std::chrono::steady_clock::now() - _armed_at >= 2 * _period;
}

} // namespace shoal::internal
