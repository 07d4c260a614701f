#include "rpc/frame_io.hh"

#include "core/coroutine.hh"

namespace shoal::rpc {

namespace {

/// Decodes a header read from a stream: the flags of RDMA message links are refused there.
frame_header decode_stream_header(const char* in, size_t max_frame) {
    frame_header h = frame_header::decode(in, max_frame);
    if (h.flags != 0) {
        throw protocol_error("RPC frame with RDMA-only flags on a stream");
    }
    return h;
}

/// The general case: the frame spans received buffers (read_exactly gathers them).
future<std::optional<frame>> read_frame_slow(net::input_stream& in, size_t max_frame) {
    net::temporary_buffer head = co_await in.read_exactly(frame_header::size);
    frame f;
    f.header = decode_stream_header(head.get(), max_frame);
    size_t body = f.header.body_size();
    if (body > 0) {
        net::temporary_buffer all = co_await in.read_exactly(body);
        f.attachments = all.share(f.header.payload_size, f.header.attachment_size);
        all.trim(f.header.payload_size);
        f.payload = std::move(all);
    }
    co_return std::move(f);
}

} // namespace

future<std::optional<frame>> read_frame(net::input_stream& in, size_t max_frame) {
    return in.read().then([&in, max_frame](net::temporary_buffer b) -> future<std::optional<frame>> {
        if (b.empty()) {
            return make_ready_future<std::optional<frame>>(std::nullopt);
        }
        // Fast path: the whole frame is in this buffer (small calls, and pipelined ones that
        // arrived together): slice it out, no copy and no coroutine.
        if (b.size() >= frame_header::size) {
            frame f;
            f.header = decode_stream_header(b.get(), max_frame);
            size_t total = frame_header::size + f.header.body_size();
            if (b.size() >= total) {
                f.payload = b.share(frame_header::size, f.header.payload_size);
                f.attachments = b.share(frame_header::size + f.header.payload_size, f.header.attachment_size);
                if (b.size() > total) {
                    b.trim_front(total);
                    in.unread(std::move(b));
                }
                return make_ready_future<std::optional<frame>>(std::move(f));
            }
        }
        in.unread(std::move(b));
        return read_frame_slow(in, max_frame);
    });
}

void frame_writer::send(outgoing_frame&& f) {
    if (_error || _closed) {
        return;
    }
    f.header.encode(f.head.get_write());
    _queued_bytes += f.wire_size();
    _queue.push_back(std::move(f));
    if (!_running) {
        _running = true;
        (void)run();
    }
}

future<> frame_writer::run() {
    try {
        while (!_queue.empty() && !_error) {
            while (!_queue.empty() && !_error) {
                outgoing_frame f = std::move(_queue.front());
                _queue.pop_front();
                size_t size = f.wire_size();
                co_await _out.write(std::move(f.head));
                for (auto& a : f.attachments) {
                    co_await _out.write(std::move(a));
                }
                _queued_bytes -= std::min(size, _queued_bytes);
                wake();
            }
            // Everything that was ready went out back to back; one flush for the batch.
            co_await _out.flush();
        }
    } catch (...) {
        abort(std::current_exception());
    }
    _running = false;
    wake();
    if (_idle) {
        std::exchange(_idle, std::nullopt)->set_value();
    }
}

void frame_writer::wake() noexcept {
    if (_below && (_queued_bytes < _wait_limit || _error)) {
        std::exchange(_below, std::nullopt)->set_value();
    }
}

future<> frame_writer::wait_below(size_t limit) {
    if (_queued_bytes < limit || _error) {
        return make_ready_future<>();
    }
    _wait_limit = limit;
    _below.emplace();
    return _below->get_future();
}

future<> frame_writer::close() {
    _closed = true;
    if (_running) {
        _idle.emplace();
        co_await _idle->get_future();
    }
    if (!_error) {
        co_await _out.close();
    }
}

void frame_writer::abort(std::exception_ptr why) noexcept {
    if (!_error) {
        _error = why;
    }
    _queue.clear();
    _queued_bytes = 0;
    wake();
}

} // namespace shoal::rpc
