#include "net/stream.hh"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace shoal::net {

// --- input_stream

future<temporary_buffer> input_stream::read() {
    if (_held) {
        return make_ready_future<temporary_buffer>(std::move(_held));
    }
    if (!_source) {
        return make_ready_future<temporary_buffer>();
    }
    return _source->get();
}

future<temporary_buffer> input_stream::read_up_to(size_t n) {
    if (n == 0) {
        return make_ready_future<temporary_buffer>();
    }
    if (_held) {
        if (_held.size() <= n) {
            return make_ready_future<temporary_buffer>(std::move(_held));
        }
        auto front = _held.share(0, n);
        _held.trim_front(n);
        return make_ready_future<temporary_buffer>(std::move(front));
    }
    return read().then([this, n](temporary_buffer b) {
        if (b.size() > n) {
            _held = b.share(n, b.size() - n);
            b.trim(n);
        }
        return b;
    });
}

future<temporary_buffer> input_stream::read_exactly(size_t n) {
    if (n == 0) {
        co_return temporary_buffer();
    }
    // Fast path: one received buffer holds it all; slice without copying.
    temporary_buffer first = co_await read();
    if (first.size() >= n) {
        if (first.size() > n) {
            _held = first.share(n, first.size() - n);
            first.trim(n);
        }
        co_return std::move(first);
    }
    if (first.empty()) {
        throw unexpected_eof("stream ended before " + std::to_string(n) + " bytes arrived (got 0)");
    }
    temporary_buffer out(n);
    size_t have = first.size();
    std::memcpy(out.get_write(), first.get(), have);
    first.reset();
    while (have < n) {
        temporary_buffer b = co_await read();
        if (b.empty()) {
            throw unexpected_eof("stream ended before " + std::to_string(n) + " bytes arrived (got " +
                                 std::to_string(have) + ")");
        }
        size_t take = std::min(b.size(), n - have);
        std::memcpy(out.get_write() + have, b.get(), take);
        have += take;
        if (take < b.size()) {
            b.trim_front(take);
            _held = std::move(b);
        }
    }
    co_return std::move(out);
}

future<> input_stream::close() {
    _held.reset();
    if (!_source) {
        return make_ready_future<>();
    }
    return _source->close();
}

// --- output_stream

namespace {
future<> not_connected() {
    return make_exception_future<>(std::logic_error("output_stream: not connected to a socket"));
}
} // namespace

output_stream::output_stream(std::unique_ptr<data_sink_impl> sink, size_t buffer_size)
    : _sink(std::move(sink)) {
    size_t hint = _sink ? _sink->buffer_size_hint() : 0;
    _buffer_size = buffer_size ? buffer_size : (hint ? hint : 8192);
}

future<> output_stream::put_gathered() {
    if (_used == 0) {
        return make_ready_future<>();
    }
    if (_used <= small_put) {
        // A few bytes (a request, a reply): hand over a copy of just them and keep the gathering
        // buffer for the next writes; a small allocation is far cheaper than a new big buffer.
        auto bytes = temporary_buffer::copy_of(std::string_view(_buf.get(), _used));
        _used = 0;
        return _sink->put(std::move(bytes));
    }
    _buf.trim(_used);
    _used = 0;
    return _sink->put(std::move(_buf));
}

future<> output_stream::write(std::string_view bytes) {
    if (bytes.empty()) {
        return make_ready_future<>();
    }
    if (!_sink) {
        return not_connected();
    }
    if (!_buf) {
        _buf = temporary_buffer(_buffer_size);
    }
    size_t room = _buffer_size - _used;
    if (bytes.size() <= room) {
        std::memcpy(_buf.get_write() + _used, bytes.data(), bytes.size());
        _used += bytes.size();
        if (_used < _buffer_size) {
            return make_ready_future<>();
        }
        return put_gathered();
    }
    if (_used == 0 && bytes.size() >= _buffer_size) {
        // Large write on an empty buffer: one copy straight into a buffer of its own.
        return _sink->put(temporary_buffer::copy_of(bytes));
    }
    std::memcpy(_buf.get_write() + _used, bytes.data(), room);
    _used += room;
    // The caller's bytes may go once this returns: copy the rest now, send it after the
    // gathered bytes.
    auto rest = temporary_buffer::copy_of(bytes.substr(room));
    return put_gathered().then([this, rest = std::move(rest)]() mutable { return write(std::move(rest)); });
}

future<> output_stream::write(temporary_buffer buf) {
    if (buf.empty()) {
        return make_ready_future<>();
    }
    if (!_sink) {
        return not_connected();
    }
    if (buf.size() < _buffer_size / 2 || (_used && _used + buf.size() <= _buffer_size)) {
        // Small: gathered (write(string_view) copies everything before it returns).
        return write(buf.view());
    }
    return put_gathered().then([this, buf = std::move(buf)]() mutable { return _sink->put(std::move(buf)); });
}

future<> output_stream::flush() {
    if (!_sink) {
        return not_connected();
    }
    return put_gathered().then([this] { return _sink->flush(); });
}

future<> output_stream::close() {
    if (!_sink) {
        return make_ready_future<>();
    }
    return flush().then([this] { return _sink->close(); });
}

// --- connected_socket

input_stream connected_socket::input() {
    return input_stream(_impl->source());
}

output_stream connected_socket::output(size_t buffer_size) {
    return output_stream(_impl->sink(), buffer_size);
}

} // namespace shoal::net
