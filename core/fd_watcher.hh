#pragma once

#include "core/future.hh"
#include "core/reactor.hh"

#include <functional>

namespace shoal {

/// Watches a file descriptor for readability through the shard's io_uring (IORING_OP_POLL_ADD)
/// and calls `on_readable` each time it becomes readable, then watches again: the shard sleeps
/// in io_uring and such an fd wakes it, with no extra thread (net/rdma watches its CQ completion
/// channels, its rdma_cm event channel and the device's events with it). A failed poll is logged and the fd
/// watched again (and `on_readable` still runs: the handler reads until the fd is empty); after
/// `max_consecutive_errors` failures in a row it stops and calls `on_failed` with the errno.
/// Lives on one shard; stop it before destroying it.
class fd_watcher final : public io_completion {
public:
    /// Polls failing this many times in a row make the watcher give up.
    static constexpr unsigned max_consecutive_errors = 16;
    /// Watches `fd` (not owned, not closed) once `start()` is called.
    fd_watcher(int fd, std::function<void()> on_readable, std::function<void(int)> on_failed = {});
    ~fd_watcher();
    fd_watcher(const fd_watcher&) = delete;
    fd_watcher& operator=(const fd_watcher&) = delete;

    /// Starts watching (queues the poll request with the reactor's next submission).
    void start();
    /// Stops watching; resolves once io_uring no longer references this object.
    future<> stop();
    /// Times `on_readable` ran.
    uint64_t wakeups() const noexcept { return _wakeups; }
    /// Polls that failed (each was re-armed unless the watcher gave up).
    uint64_t errors() const noexcept { return _errors; }
    /// True once the watcher gave up after persistent errors.
    bool failed() const noexcept { return _failed; }
    /// Handles one poll result as io_uring would deliver it (tests inject errors with it).
    void complete(int result, uint32_t flags) noexcept override;

private:
    void arm();

    int _fd;
    std::function<void()> _on_readable;
    std::function<void(int)> _on_failed;
    bool _pending = false;
    bool _stopping = false;
    promise<> _stopped;
    uint64_t _wakeups = 0;
    uint64_t _errors = 0;
    unsigned _consecutive_errors = 0;
    bool _failed = false;
};

} // namespace shoal
