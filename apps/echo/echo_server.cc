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
    _conns.accept_from(_ss, [this](net::connected_socket s) { return serve(std::move(s)); });
}

future<> echo_server::serve(net::connected_socket s) {
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
        echo_log.debug("connection from {} ended: {}", s.peer_address().to_string(),
                       std::current_exception());
    }
}

future<> echo_server::stop() {
    if (_conns.stopping()) {
        return make_ready_future<>(); // stopped before (sharded::stop calls it again)
    }
    return _conns.stop(_shutdown_timeout);
}

} // namespace shoal::echo
