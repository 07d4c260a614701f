#pragma once

#include "core/future.hh"
#include "core/reactor.hh"

#include <functional>

namespace shoal::net::rdma::internal {

/// Watches a file descriptor for readability through the shard's io_uring (IORING_OP_POLL_ADD)
/// and calls `on_readable` each time it becomes readable, then watches again. Used for the CQ
/// completion channel and the rdma_cm event channel: the shard sleeps in io_uring and such an
/// fd wakes it, with no extra thread. Lives on one shard; stop it before destroying it.
class fd_watcher final : public io_completion {
public:
    /// Watches `fd` (not owned, not closed) once `start()` is called.
    fd_watcher(int fd, std::function<void()> on_readable);
    ~fd_watcher();
    fd_watcher(const fd_watcher&) = delete;
    fd_watcher& operator=(const fd_watcher&) = delete;

    /// Starts watching (queues the poll request with the reactor's next submission).
    void start();
    /// Stops watching; resolves once io_uring no longer references this object.
    future<> stop();
    /// Times `on_readable` ran.
    uint64_t wakeups() const noexcept { return _wakeups; }

private:
    void complete(int result, uint32_t flags) noexcept override;
    void arm();

    int _fd;
    std::function<void()> _on_readable;
    bool _pending = false;
    bool _stopping = false;
    promise<> _stopped;
    uint64_t _wakeups = 0;
};

} // namespace shoal::net::rdma::internal
