// The stream link: frames back to back on a connected_socket (TCP, or an RDMA stream).
#include "rpc/link.hh"

#include "core/coroutine.hh"

namespace shoal::rpc {

namespace {

class stream_link_impl final : public link {
public:
    explicit stream_link_impl(net::connected_socket s)
        : _socket(std::move(s))
        , _in(_socket.input())
        , _writer(_socket.output()) {}

    future<std::optional<frame>> read_frame(size_t max_frame) override {
        if (_input_shut) {
            return make_ready_future<std::optional<frame>>(std::nullopt);
        }
        return rpc::read_frame(_in, max_frame);
    }
    void send(outgoing_frame&& f) override { _writer.send(std::move(f)); }
    size_t queued_bytes() const noexcept override { return _writer.queued_bytes(); }
    future<> wait_below(size_t limit) override { return _writer.wait_below(limit); }
    std::exception_ptr failed() const noexcept override { return _writer.failed(); }
    future<> close() override { return _writer.close(); }
    void abort_output(std::exception_ptr why) noexcept override { _writer.abort(why); }
    // Both wake a paused sink loop, so that it reads on to the end and reports it.
    void abort() noexcept override {
        _socket.abort();
        resume_reading();
    }
    void shutdown_input() noexcept override {
        _input_shut = true;
        try {
            _socket.shutdown_input();
        } catch (...) {
        }
        resume_reading();
    }
    void set_nodelay() override { _socket.set_nodelay(true); }
    net::socket_address peer_address() const override { return _socket.peer_address(); }

private:
    net::connected_socket _socket;
    net::input_stream _in;
    frame_writer _writer;
    bool _input_shut = false;
};

} // namespace

void link::read_frames_into(frame_sink& sink, size_t max_frame) {
    (void)read_frames_loop(*this, sink, max_frame);
}

// Touches neither the link nor the sink after `on_end`; the link's owner keeps both until then.
future<> link::read_frames_loop(link& l, frame_sink& sink, size_t max_frame) {
    std::exception_ptr why;
    try {
        for (;;) {
            while (l._reading_paused) {
                l._reading_resumed.emplace();
                co_await l._reading_resumed->get_future();
            }
            std::optional<frame> f = co_await l.read_frame(max_frame);
            if (!f) {
                break;
            }
            sink.on_frame(std::move(*f));
        }
    } catch (...) {
        why = std::current_exception();
    }
    sink.on_end(why);
}

void link::pause_reading() noexcept {
    _reading_paused = true;
}

void link::resume_reading() noexcept {
    _reading_paused = false;
    if (_reading_resumed) {
        std::exchange(_reading_resumed, std::nullopt)->set_value();
    }
}

std::unique_ptr<link> stream_link(net::connected_socket s) {
    return std::make_unique<stream_link_impl>(std::move(s));
}

} // namespace shoal::rpc
