#pragma once

// The RDMA stream transport: implementations of the transport-neutral stream interfaces of
// net/stream.hh over a connection (SEND/RECV with credits; see docs/rdma.md). Users reach it
// through rdma::connect / rdma::listen (connection.hh) or connection::socket().

#include "net/rdma/connection.hh"
#include "net/stream.hh"

#include <memory>

namespace shoal::net::rdma::internal {

/// Reads what the peer sent: each received buffer is handed over without a copy and returns to
/// the pool when the reader drops it.
class stream_source final : public net::data_source_impl {
public:
    /// Reads the connection held by `ref`; the connection sets this source's end-of-stream flag.
    explicit stream_source(std::shared_ptr<connection_ref> ref);
    ~stream_source() override;
    future<net::temporary_buffer> get() override;
    /// `get()` that `as` cancels: the pending read fails with the abort's reason; messages that
    /// arrive later stay queued (their credits return when a later read takes them).
    future<net::temporary_buffer> get(abort_source& as) override;
    future<> close() override;

private:
    std::shared_ptr<connection_ref> _ref;
    abort_source::subscription _read_abort;
};

/// Sends bytes as messages of at most the peer's receive size, within the peer's credits.
/// Registered memory is sent in place; other memory is sent inline when small, else copied
/// into the pool.
class stream_sink final : public net::data_sink_impl {
public:
    /// Writes to the connection held by `ref`.
    explicit stream_sink(std::shared_ptr<connection_ref> ref) noexcept
        : _ref(std::move(ref)) {
        _release_when_flushed = true; // an idle connection holds no pool memory for sending
    }
    future<> put(net::temporary_buffer buf) override;
    /// Queues every buffer before sending, so a header and a payload leave in one SEND (one
    /// scatter-gather entry each) when they fit the peer's receive size.
    future<> put_many(std::span<net::temporary_buffer> bufs) override;
    /// A buffer of the shard's registered pool (heap memory when the pool is above its high
    /// watermark or dry): what output_stream gathers into is sent in place, without a copy.
    net::temporary_buffer allocate_buffer(size_t size) override;
    future<> flush() override;
    future<> close() override;
    size_t buffer_size_hint() const noexcept override;

private:
    std::shared_ptr<connection_ref> _ref;
};

/// A connected_socket over an RDMA connection.
class stream_socket final : public net::connected_socket_impl {
public:
    /// The stream of the connection held by `ref`.
    explicit stream_socket(std::shared_ptr<connection_ref> ref) noexcept
        : _ref(std::move(ref)) {}
    std::unique_ptr<net::data_source_impl> source() override;
    std::unique_ptr<net::data_sink_impl> sink() override;
    void shutdown_input() override;
    /// Starts ending the output (end of stream after the queued bytes) without waiting;
    /// errors are dropped.
    void shutdown_output() override;
    /// Breaks the connection now: pending and later reads and writes fail with
    /// connection_closed, queued and unread bytes are dropped, the QP goes to the error state
    /// and its resources are freed at the end of this poll, without waiting for the peer.
    void abort() noexcept override;
    void set_nodelay(bool on) override { _nodelay = on; }
    bool get_nodelay() const override { return _nodelay; }
    void set_keepalive(bool on) override { _keepalive = on; }
    bool get_keepalive() const override { return _keepalive; }
    net::socket_address local_address() const override;
    net::socket_address peer_address() const override;

private:
    std::shared_ptr<connection_ref> _ref;
    bool _source_taken = false;
    bool _sink_taken = false;
    bool _nodelay = true; // sends are never delayed (coalescing happens only without credits)
    bool _keepalive = false;
};

/// A server_socket whose connections are RDMA streams.
class stream_server_socket final : public net::server_socket_impl {
public:
    /// Serves the connections `l` accepts, each as a stream.
    explicit stream_server_socket(listener l) noexcept
        : _l(std::move(l)) {}
    future<net::accept_result> accept() override;
    void abort_accept() override { _l.abort_accept(); }
    net::socket_address local_address() const override { return _l.local_address(); }

private:
    listener _l;
};

} // namespace shoal::net::rdma::internal
