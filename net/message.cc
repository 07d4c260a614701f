#include "net/message.hh"

#include "core/coroutine.hh"

#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace shoal::net {

bool message_connection_impl::receive_into(message_receiver& r) {
    auto hand_over = [&r](future<std::optional<temporary_buffer>>& f) {
        if (f.failed()) {
            r.on_receive_error(f.get_exception());
        } else {
            r.on_message(f.get());
        }
    };
    future<std::optional<temporary_buffer>> f = receive();
    if (f.available()) {
        hand_over(f);
        return true;
    }
    (void)std::move(f).then_wrapped(
        [hand_over](future<std::optional<temporary_buffer>> ready) mutable { hand_over(ready); });
    return false;
}

size_t internal::checked_message_size(std::span<temporary_buffer> parts, size_t max) {
    size_t n = 0;
    for (auto& p : parts) {
        n += p.size();
    }
    if (n == 0) {
        throw std::invalid_argument(
            "message_connection::send: empty message (a message has at least one byte)");
    }
    if (n > max) {
        throw std::invalid_argument("message_connection::send: a message of " + std::to_string(n) +
                                    " bytes exceeds the largest this connection sends (" +
                                    std::to_string(max) + " bytes)");
    }
    return n;
}

namespace {

constexpr size_t frame_header = 4;

/// Messages as length-prefixed frames over a byte stream.
class framed_connection final : public message_connection_impl {
public:
    framed_connection(connected_socket s, size_t max)
        : _s(std::move(s))
        , _in(_s.input())
        , _out(_s.output())
        , _max(max) {}

    future<> send(std::span<temporary_buffer> parts) override {
        size_t n = 0;
        try {
            n = internal::checked_message_size(parts, _max);
        } catch (...) {
            return make_exception_future<>(std::current_exception());
        }
        char header[frame_header];
        for (size_t i = 0; i < frame_header; ++i) {
            header[i] = char((n >> (8 * i)) & 0xff);
        }
        // The header is gathered into the sink's memory; the parts follow in the same put_many
        // (TCP: one sendmsg).
        auto f = _out.write(std::string_view(header, frame_header));
        if (!f.available() || f.failed()) {
            // The sink pushes back: keep the parts (the caller's span may go when this returns).
            std::vector<temporary_buffer> owned(std::make_move_iterator(parts.begin()),
                                                std::make_move_iterator(parts.end()));
            return std::move(f).then([this, owned = std::move(owned)]() mutable {
                return _out.write(std::span<temporary_buffer>(owned)).then([this] { return _out.flush(); });
            });
        }
        return _out.write(parts).then([this] { return _out.flush(); });
    }

    future<std::optional<temporary_buffer>> receive() override { return receive_frame(); }

    size_t max_message_size() const noexcept override { return _max; }

    future<> close() override { return _out.close(); }

    void abort() noexcept override { _s.abort(); }

    socket_address peer_address() const override { return _s.peer_address(); }

private:
    future<std::optional<temporary_buffer>> receive_frame() {
        temporary_buffer first = co_await _in.read_up_to(frame_header);
        if (first.empty()) {
            co_return std::nullopt;
        }
        unsigned char h[frame_header];
        std::memcpy(h, first.get(), first.size());
        if (first.size() < frame_header) {
            temporary_buffer rest = co_await _in.read_exactly(frame_header - first.size());
            std::memcpy(h + first.size(), rest.get(), rest.size());
        }
        size_t n = size_t(h[0]) | size_t(h[1]) << 8 | size_t(h[2]) << 16 | size_t(h[3]) << 24;
        if (n == 0 || n > _max) {
            _s.abort();
            throw std::runtime_error("message_connection: a received frame of " + std::to_string(n) +
                                     " bytes is outside 1 to " + std::to_string(_max) +
                                     " bytes; the connection was aborted");
        }
        co_return co_await _in.read_exactly(n);
    }

    connected_socket _s;
    input_stream _in;
    output_stream _out;
    size_t _max;
};

} // namespace

message_connection framed_messages(connected_socket s, size_t max_message_size) {
    if (max_message_size == 0 || max_message_size > UINT32_MAX) {
        throw std::invalid_argument("framed_messages: the largest message must be 1 to 2^32 - 1 bytes");
    }
    return message_connection(std::make_unique<framed_connection>(std::move(s), max_message_size));
}

} // namespace shoal::net
