#include "core/stall_detector.hh"

#include "core/reactor.hh"

#include <cerrno>
#include <cstring>
#include <mutex>
#include <system_error>

#include <execinfo.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace shoal::internal {

namespace {

/// The detector of the calling thread's shard (null: none armed).
thread_local stall_detector* current_detector = nullptr;

/// Reports per shard and minute; the rest are counted as suppressed.
constexpr unsigned reports_per_minute = 5;
/// Frames of a report's backtrace.
constexpr int max_frames = 48;

int64_t monotonic_ns() noexcept {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts); // async-signal-safe
    return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// Appends `s` to the report buffer.
struct line_buffer {
    char buf[256];
    size_t len = 0;
    void add(const char* s) noexcept {
        while (*s && len < sizeof(buf)) {
            buf[len++] = *s++;
        }
    }
    void add(uint64_t v) noexcept {
        char digits[24];
        int n = 0;
        do {
            digits[n++] = char('0' + v % 10);
            v /= 10;
        } while (v != 0);
        while (n > 0 && len < sizeof(buf)) {
            buf[len++] = digits[--n];
        }
    }
    void write_to(int fd) const noexcept {
        size_t off = 0;
        while (off < len) {
            ssize_t n = ::write(fd, buf + off, len - off);
            if (n <= 0) {
                if (n < 0 && errno == EINTR) {
                    continue;
                }
                return;
            }
            off += size_t(n);
        }
    }
};

void install_handler_once(void (*handler)(int, siginfo_t*, void*)) {
    static std::once_flag once;
    std::call_once(once, [handler] {
        struct sigaction sa {};
        sa.sa_sigaction = handler;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (::sigaction(stall_detector::signal_number(), &sa, nullptr) != 0) {
            throw std::system_error(errno, std::system_category(), "sigaction (stall detector)");
        }
        // glibc's backtrace() loads its unwinder on first use (dlopen, malloc): do it here,
        // not in the signal handler.
        void* frames[2];
        ::backtrace(frames, 2);
    });
}

} // namespace

void stall_detector::arm(const reactor_stats& stats, unsigned shard, std::chrono::milliseconds threshold) {
    disarm();
    if (threshold.count() <= 0) {
        return;
    }
    install_handler_once(&stall_detector::on_signal);
    _stats = &stats;
    _shard = shard;
    _threshold = threshold;
    _last_progress = stats.loops + stats.tasks_run;
    _quiet_ticks = 0;
    _reported = false;
    current_detector = this;
    sigevent sev{};
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = signal_number();
    sev._sigev_un._tid = pid_t(::syscall(SYS_gettid));
    if (::timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &_timer) != 0) {
        current_detector = nullptr;
        throw std::system_error(errno, std::system_category(), "timer_create (stall detector)");
    }
    _armed = true;
    // Ticks every half threshold of the thread's CPU time: two quiet ticks are a stall.
    const int64_t half_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(threshold).count() / 2;
    itimerspec its{};
    its.it_interval.tv_sec = half_ns / 1'000'000'000;
    its.it_interval.tv_nsec = half_ns % 1'000'000'000;
    its.it_value = its.it_interval;
    if (::timer_settime(_timer, 0, &its, nullptr) != 0) {
        int err = errno;
        disarm();
        throw std::system_error(err, std::system_category(), "timer_settime (stall detector)");
    }
}

void stall_detector::disarm() noexcept {
    if (!_armed) {
        return;
    }
    ::timer_delete(_timer);
    _armed = false;
    if (current_detector == this) {
        current_detector = nullptr;
    }
}

void stall_detector::on_signal(int, siginfo_t*, void*) noexcept {
    int saved_errno = errno;
    if (stall_detector* d = current_detector) {
        d->tick();
    }
    errno = saved_errno;
}

void stall_detector::tick() noexcept {
    // The counters are written by the code this signal interrupted, on this thread.
    const uint64_t progress = _stats->loops + _stats->tasks_run;
    if (progress != _last_progress) {
        _last_progress = progress;
        _quiet_ticks = 0;
        _reported = false;
        return;
    }
    if (++_quiet_ticks < 2 || _reported) {
        return;
    }
    _reported = true;
    _stalls = _stalls + 1;
    const int64_t now = monotonic_ns();
    if (now - _window_start_ns >= 60'000'000'000) {
        _window_start_ns = now;
        _window_reports = 0;
    }
    if (_window_reports >= reports_per_minute) {
        _suppressed = _suppressed + 1;
        return;
    }
    ++_window_reports;
    report();
}

void stall_detector::report() noexcept {
    line_buffer head;
    head.add("shoal: reactor stalled on shard ");
    head.add(uint64_t(_shard));
    head.add(": one task or poll ran for over ");
    head.add(uint64_t(_threshold.count()));
    head.add(" ms of CPU time (stall ");
    head.add(_stalls);
    if (_suppressed != 0) {
        head.add("; ");
        head.add(_suppressed);
        head.add(" reports left out by the rate limit");
    }
    head.add("); backtrace:\n");
    head.write_to(STDERR_FILENO);
    void* frames[max_frames];
    int n = ::backtrace(frames, max_frames);
    // The first frames are this handler's own.
    const int skip = n > 3 ? 3 : 0;
    ::backtrace_symbols_fd(frames + skip, n - skip, STDERR_FILENO);
}

} // namespace shoal::internal
