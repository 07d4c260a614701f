#include "kv/server/reply_batch.hh"

#include "core/coroutine.hh"

#include <span>

namespace shoal::kv {

namespace {

/// Reply text handed to the socket as it is: the string's memory is sent, not copied.
class text_owner final : public net::buffer_owner {
public:
    explicit text_owner(std::string bytes) noexcept
        : _bytes(std::move(bytes)) {}
    /// The bytes to send.
    std::string& bytes() noexcept { return _bytes; }

private:
    void release() noexcept override { delete this; }
    std::string _bytes;
};

/// Text at least this large is handed over without a copy; smaller text is copied once.
constexpr size_t handover_bytes = 16 * 1024;

net::temporary_buffer text_buffer(std::string& text) {
    if (text.size() < handover_bytes) {
        auto b = net::temporary_buffer::copy_of(text);
        text.clear();
        return b;
    }
    auto* owner = new text_owner(std::move(text));
    text = std::string();
    return net::temporary_buffer(owner->bytes().data(), owner->bytes().size(), owner);
}

} // namespace

void reply_batch::seal_text() {
    if (!_text.empty()) {
        _parts_bytes += _text.size();
        _parts.push_back(text_buffer(_text));
    }
}

void reply_batch::add_value(net::temporary_buffer value) {
    seal_text();
    _parts_bytes += value.size();
    _parts.push_back(std::move(value));
}

future<> reply_batch::write_to(net::output_stream& out) {
    if (_parts.empty()) {
        if (_text.size() < handover_bytes) {
            co_await out.write(std::string_view(_text));
            _text.clear();
            co_return;
        }
        co_await out.write(text_buffer(_text));
        co_return;
    }
    seal_text();
    std::vector<net::temporary_buffer> parts = std::move(_parts);
    _parts.clear();
    _parts_bytes = 0;
    co_await out.write(std::span<net::temporary_buffer>(parts));
}

} // namespace shoal::kv
