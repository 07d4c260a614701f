#include "core/fd_watcher.hh"

#include "core/log.hh"

#include <cerrno>
#include <cstring>

#include <poll.h>

namespace shoal {

namespace {
logger watch_log("fd_watcher");
}

fd_watcher::fd_watcher(int fd, std::function<void()> on_readable, std::function<void(int)> on_failed)
    : _fd(fd)
    , _on_readable(std::move(on_readable))
    , _on_failed(std::move(on_failed)) {}

fd_watcher::~fd_watcher() {
    if (_pending) {
        watch_log.error("fd watcher of fd {} destroyed while io_uring still watches it", _fd);
    }
}

void fd_watcher::start() {
    _stopping = false;
    _failed = false;
    _consecutive_errors = 0;
    if (!_pending) {
        arm();
    }
}

void fd_watcher::arm() {
    io_uring_sqe* sqe = local_reactor().get_sqe();
    io_uring_prep_poll_add(sqe, _fd, POLLIN);
    io_uring_sqe_set_data(sqe, static_cast<io_completion*>(this));
    _pending = true;
}

future<> fd_watcher::stop() {
    _stopping = true;
    if (!_pending) {
        return make_ready_future<>();
    }
    io_uring_sqe* sqe = local_reactor().get_sqe();
    io_uring_prep_poll_remove(sqe, uint64_t(reinterpret_cast<uintptr_t>(static_cast<io_completion*>(this))));
    io_uring_sqe_set_data(sqe, nullptr);
    _stopped = promise<>();
    return _stopped.get_future();
}

void fd_watcher::complete(int result, uint32_t) noexcept {
    _pending = false;
    if (_stopping) {
        _stopped.set_value();
        return;
    }
    if (result == -ECANCELED) {
        return; // the reactor is shutting down
    }
    if (result < 0) {
        // Not watching any more would lose every later wake-up (a shard asleep forever with
        // completions queued): watch again, and give up loudly only on an error that persists.
        ++_errors;
        if (++_consecutive_errors > max_consecutive_errors) {
            watch_log.error("polling fd {} failed {} times in a row ({}): no longer watched", _fd,
                            _consecutive_errors, std::strerror(-result));
            _failed = true;
            if (_on_failed) {
                _on_failed(-result);
            }
            return;
        }
        watch_log.warn("polling fd {} failed: {}; watching it again", _fd, std::strerror(-result));
    } else {
        _consecutive_errors = 0;
        ++_wakeups;
    }
    // After an error the fd may be readable: the handler reads until empty either way.
    _on_readable();
    if (!_stopping && !_pending) {
        try {
            arm();
        } catch (...) {
            watch_log.error("cannot re-arm the poll of fd {}: {}", _fd, std::current_exception());
        }
    }
}

} // namespace shoal
