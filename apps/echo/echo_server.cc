#include "apps/echo/echo_server.hh"

#include "core/coroutine.hh"
#include "core/log.hh"

namespace shoal::echo {

namespace {
logger echo_log("echo");
} // namespace

void echo_server::start(const net::socket_address& addr, net::listen_options opts) {
    opts.reuse_port = true;
    _ss = _t.listen(addr, opts);
    _gate.enter();
    (void)accept_loop().finally([this] { _gate.leave(); });
}

future<> echo_server::accept_loop() {
    for (;;) {
        net::accept_result ar;
        try {
            ar = co_await _ss.accept();
        } catch (...) {
            if (!_gate.is_closed()) {
                echo_log.warn("accept failed, no longer accepting: {}", std::current_exception());
            }
            co_return;
        }
        if (!_gate.try_enter()) {
            co_return;
        }
        ++_connections;
        (void)serve(std::move(ar.connection)).finally([this] { _gate.leave(); });
    }
}

future<> echo_server::serve(net::connected_socket s) {
    // Keep a handle so that stop() can end the connection.
    auto it = _open.insert(_open.end(), s);
    auto in = s.input();
    auto out = s.output();
    try {
        for (;;) {
            net::temporary_buffer b = co_await in.read();
            if (b.empty()) {
                break;
            }
            _bytes += b.size();
            co_await out.write(std::move(b));
            co_await out.flush();
        }
        co_await out.close();
    } catch (...) {
        ++_errors;
        echo_log.debug("connection from {} ended: {}", it->peer_address().to_string(),
                       std::current_exception());
    }
    _open.erase(it);
}

future<> echo_server::stop() {
    auto closed = _gate.close();
    if (_ss) {
        _ss.abort_accept();
    }
    for (auto& s : _open) {
        s.shutdown_input();
    }
    co_await std::move(closed);
}

} // namespace shoal::echo
