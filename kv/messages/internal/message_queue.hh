#pragma once

#include "core/future.hh"
#include "net/message.hh"
#include "net/temporary_buffer.hh"

#include <deque>
#include <optional>

namespace shoal::kv {

/// Sends messages on one `message_connection` in order without making the caller wait: `push`
/// queues, one sender task sends (the message API takes one sender at a time). A failed send
/// aborts the connection and drops what is queued (the peer sees the connection break). The
/// connection must outlive the queue's sender: wait for `drained()` before destroying either.
class message_queue {
public:
    /// A queue sending on `m`.
    explicit message_queue(net::message_connection& m) noexcept
        : _m(&m) {}
    message_queue(const message_queue&) = delete;
    message_queue& operator=(const message_queue&) = delete;

    /// Queues `b` as one message; starts the sender when it is idle.
    void push(net::temporary_buffer b);
    /// Resolves once nothing is queued or being sent.
    future<> drained();
    /// Drops the queued messages (the one being sent still goes).
    void clear() noexcept { _out.clear(); }

private:
    future<> run();

    net::message_connection* _m;
    std::deque<net::temporary_buffer> _out;
    bool _sending = false;
    std::optional<promise<>> _idle;
};

} // namespace shoal::kv
