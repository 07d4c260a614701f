#include "kv/messages/internal/message_queue.hh"

#include "core/coroutine.hh"

namespace shoal::kv {

void message_queue::push(net::temporary_buffer b) {
    _out.push_back(std::move(b));
    if (!_sending) {
        _sending = true;
        (void)run();
    }
}

future<> message_queue::run() {
    try {
        while (!_out.empty()) {
            net::temporary_buffer next = std::move(_out.front());
            _out.pop_front();
            co_await _m->send(std::move(next));
        }
    } catch (...) {
        _out.clear();
        _m->abort();
    }
    _sending = false;
    if (_idle) {
        std::exchange(_idle, std::nullopt)->set_value();
    }
}

future<> message_queue::drained() {
    if (!_sending) {
        return make_ready_future<>();
    }
    if (!_idle) {
        _idle.emplace();
    }
    return _idle->get_future();
}

} // namespace shoal::kv
