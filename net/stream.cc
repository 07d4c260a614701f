#include "net/stream.hh"

#include "core/coroutine.hh"

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

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

future<temporary_buffer> input_stream::read(abort_source& as) {
    if (as.abort_requested()) {
        return make_exception_future<temporary_buffer>(as.abort_exception());
    }
    if (_held) {
        return make_ready_future<temporary_buffer>(std::move(_held));
    }
    if (!_source) {
        return make_ready_future<temporary_buffer>();
    }
    return _source->get(as);
}

future<temporary_buffer> data_source_impl::get(abort_source& as) {
    if (as.abort_requested()) {
        return make_exception_future<temporary_buffer>(as.abort_exception());
    }
    return make_exception_future<temporary_buffer>(
        std::logic_error("input_stream::read(abort_source&): this transport cannot abort a read"));
}

future<accept_result> server_socket_impl::accept(abort_source& as) {
    if (as.abort_requested()) {
        return make_exception_future<accept_result>(as.abort_exception());
    }
    return make_exception_future<accept_result>(
        std::logic_error("server_socket::accept(abort_source&): this transport cannot abort an accept"));
}

future<temporary_buffer> input_stream::read_up_to(size_t n) {
    return read_up_to_from(n, nullptr);
}

future<temporary_buffer> input_stream::read_up_to(size_t n, abort_source& as) {
    return read_up_to_from(n, &as);
}

future<temporary_buffer> input_stream::read_up_to_from(size_t n, abort_source* as) {
    if (as && as->abort_requested()) {
        return make_exception_future<temporary_buffer>(as->abort_exception());
    }
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
    return read_maybe_abortable(as).then([this, n](temporary_buffer b) {
        if (b.size() > n) {
            _held = b.share(n, b.size() - n);
            b.trim(n);
        }
        return b;
    });
}

future<temporary_buffer> input_stream::read_exactly(size_t n) {
    return read_exactly_from(n, nullptr);
}

future<temporary_buffer> input_stream::read_exactly(size_t n, abort_source& as) {
    return read_exactly_from(n, &as);
}

future<temporary_buffer> input_stream::read_exactly_from(size_t n, abort_source* as) {
    if (as && as->abort_requested()) {
        std::rethrow_exception(as->abort_exception());
    }
    if (n == 0) {
        co_return temporary_buffer();
    }
    // Fast path: one received buffer holds it all; slice without copying.
    temporary_buffer first = co_await read_maybe_abortable(as);
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
    internal::count_copy(have);
    first.reset();
    while (have < n) {
        temporary_buffer b;
        std::exception_ptr aborted;
        try {
            b = co_await read_maybe_abortable(as);
        } catch (...) {
            aborted = std::current_exception();
        }
        if (aborted) {
            // Nothing is lost: what was gathered is read again by the next read.
            out.trim(have);
            _held = std::move(out);
            std::rethrow_exception(aborted);
        }
        if (b.empty()) {
            throw unexpected_eof("stream ended before " + std::to_string(n) + " bytes arrived (got " +
                                 std::to_string(have) + ")");
        }
        size_t take = std::min(b.size(), n - have);
        std::memcpy(out.get_write() + have, b.get(), take);
        internal::count_copy(take);
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

// --- copy counters and sink defaults

thread_local copy_stats internal::tl_stream_copies;

const copy_stats& stream_copies() noexcept {
    return internal::tl_stream_copies;
}

namespace {
future<> put_in_turn(data_sink_impl& sink, std::vector<temporary_buffer> bufs) {
    for (auto& b : bufs) {
        co_await sink.put(std::move(b));
    }
}
} // namespace

future<> data_sink_impl::put_many(std::span<temporary_buffer> bufs) {
    if (bufs.size() == 1) {
        return put(std::move(bufs[0]));
    }
    std::vector<temporary_buffer> owned(std::make_move_iterator(bufs.begin()),
                                        std::make_move_iterator(bufs.end()));
    return put_in_turn(*this, std::move(owned));
}

// --- output_stream

namespace {
future<> not_connected() {
    return make_exception_future<>(std::logic_error("output_stream: not connected to a socket"));
}

/// Copies `bytes` to `to` and counts the copy.
void copy_counted(char* to, std::string_view bytes) noexcept {
    std::memcpy(to, bytes.data(), bytes.size());
    internal::count_copy(bytes.size());
}
} // namespace

output_stream::output_stream(std::unique_ptr<data_sink_impl> sink, size_t buffer_size)
    : _sink(std::move(sink)) {
    size_t hint = _sink ? _sink->buffer_size_hint() : 0;
    _buffer_size = buffer_size ? buffer_size : (hint ? hint : 8192);
}

temporary_buffer output_stream::take_gathered() noexcept {
    // Hand over a slice and keep gathering behind it: the sink only reads the slice, we only
    // write past it. A tail too short to be worth it is dropped (its memory goes with the
    // last slice).
    temporary_buffer gathered = _buf.share(0, _used);
    _buf.trim_front(_used);
    _used = 0;
    if (_buf.size() < std::max<size_t>(_buffer_size / 8, 1)) {
        _buf.reset();
    }
    return gathered;
}

future<> output_stream::put_gathered() {
    if (_used == 0) {
        return make_ready_future<>();
    }
    return _sink->put(take_gathered());
}

future<> output_stream::write(std::string_view bytes) {
    if (bytes.empty()) {
        return make_ready_future<>();
    }
    if (!_sink) {
        return not_connected();
    }
    for (;;) {
        size_t room = _buf.size() - _used;
        if (bytes.size() <= room) {
            copy_counted(_buf.get_write() + _used, bytes);
            _used += bytes.size();
            return _used < _buf.size() ? make_ready_future<>() : put_gathered();
        }
        if (_used == 0) {
            if (bytes.size() >= _buffer_size) {
                // Large write, nothing gathered: one copy into memory of its own.
                temporary_buffer own = _sink->allocate_buffer(bytes.size());
                copy_counted(own.get_write(), bytes);
                return _sink->put(std::move(own));
            }
            _buf = _sink->allocate_buffer(_buffer_size);
            continue;
        }
        // Fill the room, hand the gathered bytes over, go on with the rest.
        copy_counted(_buf.get_write() + _used, bytes.substr(0, room));
        _used += room;
        bytes.remove_prefix(room);
        auto put = put_gathered();
        if (!put.available() || put.failed()) {
            if (put.failed()) {
                return put;
            }
            // The sink pushes back and the caller's bytes may go once this returns: copy the
            // rest now, write it once the sink has room.
            temporary_buffer rest = temporary_buffer::copy_of(bytes);
            internal::count_copy(bytes.size());
            return std::move(put).then(
                [this, rest = std::move(rest)]() mutable { return write(std::move(rest)); });
        }
    }
}

future<> output_stream::write(temporary_buffer buf) {
    if (buf.empty()) {
        return make_ready_future<>();
    }
    if (!_sink) {
        return not_connected();
    }
    if (buf.size() < _buffer_size / 2 || (_used && _used + buf.size() <= _buf.size())) {
        // Small: gathered (write(string_view) copies everything before it returns).
        return write(buf.view());
    }
    return put_gathered().then([this, buf = std::move(buf)]() mutable { return _sink->put(std::move(buf)); });
}

future<> output_stream::write(std::span<temporary_buffer> bufs) {
    if (!_sink) {
        return not_connected();
    }
    if (_used > 0 && bufs.size() < 8) {
        // What was gathered goes in the same put_many, in front: a header written with
        // write(string_view) and a payload given here can leave in one send.
        std::array<temporary_buffer, 8> all;
        all[0] = take_gathered();
        for (size_t i = 0; i < bufs.size(); ++i) {
            all[i + 1] = std::move(bufs[i]);
        }
        return _sink->put_many(std::span<temporary_buffer>(all.data(), bufs.size() + 1));
    }
    auto put = put_gathered();
    if (put.available() && !put.failed()) {
        return _sink->put_many(bufs);
    }
    std::vector<temporary_buffer> owned(std::make_move_iterator(bufs.begin()),
                                        std::make_move_iterator(bufs.end()));
    return std::move(put).then([this, owned = std::move(owned)]() mutable {
        return _sink->put_many(std::span<temporary_buffer>(owned));
    });
}

future<> output_stream::flush() {
    if (!_sink) {
        return not_connected();
    }
    auto put = put_gathered();
    if (_sink->release_buffer_when_flushed()) {
        _buf.reset(); // what was handed over keeps its memory until sent
        _used = 0;
    }
    return std::move(put).then([this] { return _sink->flush(); });
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
