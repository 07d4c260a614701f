#include "kv/client/internal/text_transport.hh"

#include "core/coroutine.hh"
#include "kv/protocol/executor.hh"
#include "net/tcp/tcp.hh"

#include <charconv>

namespace shoal::kv::internal {

namespace {

bool parse_u64(std::string_view s, uint64_t& out) noexcept {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

/// The next space-separated token of `line` from `pos` (advanced past it).
std::string_view token(std::string_view line, size_t& pos) noexcept {
    size_t end = line.find(' ', pos);
    if (end == std::string_view::npos) {
        end = line.size();
    }
    std::string_view t = line.substr(pos, end - pos);
    pos = end < line.size() ? end + 1 : end;
    return t;
}

void append_signed(std::string& out, int64_t n) {
    if (n < 0) {
        out += '-';
        append_number(out, uint64_t(0) - uint64_t(n));
    } else {
        append_number(out, uint64_t(n));
    }
}

} // namespace

text_transport::text_transport(net::socket_address addr, unsigned index,
                               std::chrono::milliseconds connect_timeout,
                               std::chrono::milliseconds request_timeout)
    : _addr(addr)
    , _index(index)
    , _connect_timeout(connect_timeout)
    , _request_timeout(request_timeout) {
    _watchdog.set_callback([this] { check_deadline(); });
}

void text_transport::check_deadline() noexcept {
    if (!_pending.empty() && !_failed && lowres_clock::now() >= _pending.front().deadline) {
        // Replies come in order: a request that is not answered holds every later one, so the
        // connection cannot be trusted any more.
        fail(std::make_exception_ptr(
            error(client_errc::connection,
                  "no reply within " + std::to_string(_request_timeout.count()) + " ms; connection closed")));
    }
}

text_transport::~text_transport() {
    assert(!_running && "text_transport destroyed before close() resolved");
}

client_error text_transport::error(client_errc code, std::string_view what) const {
    return client_error(code, _index, "kv server " + _addr.to_string() + ": " + std::string(what));
}

void text_transport::check_open(std::string_view key) {
    if (_closing) {
        throw client_error(client_errc::bad_request, _index,
                           "kv client closed: request for key '" + std::string(key) + "' refused");
    }
}

future<std::vector<std::optional<fetched_value>>> text_transport::get(std::vector<std::string> keys) {
    return fetch(std::move(keys), std::nullopt);
}

future<std::optional<fetched_value>> text_transport::gat(std::string_view key, int64_t exptime) {
    std::vector<std::string> keys;
    keys.emplace_back(key);
    return fetch(std::move(keys), exptime).then([](std::vector<std::optional<fetched_value>> v) {
        return std::move(v.front());
    });
}

future<std::vector<std::optional<fetched_value>>> text_transport::fetch(std::vector<std::string> keys,
                                                                        std::optional<int64_t> touch) {
    try {
        check_open(keys.empty() ? std::string_view() : std::string_view(keys.front()));
    } catch (...) {
        return make_exception_future<std::vector<std::optional<fetched_value>>>(std::current_exception());
    }
    if (touch) {
        _tx += "gats ";
        append_signed(_tx, *touch);
    } else {
        _tx += "gets";
    }
    for (const auto& k : keys) {
        _tx += ' ';
        _tx += k;
    }
    _tx += "\r\n";
    return enqueue(expect::values, std::move(keys)).then([](reply r) { return std::move(r.values); });
}

future<store_outcome> text_transport::store(store_op op, std::string_view key, std::string_view value,
                                            uint32_t flags, int64_t exptime, uint64_t cas_unique) {
    try {
        check_open(key);
    } catch (...) {
        return make_exception_future<store_outcome>(std::current_exception());
    }
    static constexpr std::string_view verbs[] = {"set ", "add ", "replace ", "cas ", "append ", "prepend "};
    _tx += verbs[int(op)];
    _tx += key;
    _tx += ' ';
    append_number(_tx, flags);
    _tx += ' ';
    append_signed(_tx, exptime);
    _tx += ' ';
    append_number(_tx, value.size());
    if (op == store_op::cas) {
        _tx += ' ';
        append_number(_tx, cas_unique);
    }
    _tx += "\r\n";
    _tx += value;
    _tx += "\r\n";
    return enqueue(expect::stored, {}).then([](reply r) { return r.outcome; });
}

future<store_outcome> text_transport::store_from(store_op op, std::string_view key, net::rdma::local_span src,
                                                 uint32_t flags, int64_t exptime, uint64_t cas_unique) {
    // `store` copies the value into the write buffer before it returns: the span may go.
    return store(op, key, std::string_view(src.addr, src.length), flags, exptime, cas_unique);
}

future<std::optional<placed_value>> text_transport::get_into(std::string_view key_view,
                                                             net::rdma::local_span dst) {
    std::string key(key_view); // before the first suspension: the caller's key lasts the call only
    std::vector<std::string> keys;
    keys.push_back(key);
    std::vector<std::optional<fetched_value>> got = co_await get(std::move(keys));
    if (!got.front()) {
        co_return std::nullopt;
    }
    const fetched_value& v = *got.front();
    std::optional<placed_value> placed = copy_into(dst, v.data, v.flags, v.cas);
    if (!placed) {
        client_error e = error(client_errc::bad_request,
                               "get_into: the value of '" + key + "' has " + std::to_string(v.data.size()) +
                                   " bytes, the buffer " + std::to_string(dst.length));
        throw client_error(e.code(), e.server(), e.what(), v.data.size());
    }
    co_return placed;
}

future<bool> text_transport::found_command(expect what, std::string_view verb, std::string_view key,
                                           std::optional<int64_t> arg) {
    try {
        check_open(key);
    } catch (...) {
        return make_exception_future<bool>(std::current_exception());
    }
    _tx += verb;
    _tx += key;
    if (arg) {
        _tx += ' ';
        append_signed(_tx, *arg);
    }
    _tx += "\r\n";
    return enqueue(what, {}).then([](reply r) { return r.found; });
}

future<bool> text_transport::remove(std::string_view key) {
    return found_command(expect::deleted, "delete ", key, std::nullopt);
}

future<bool> text_transport::touch(std::string_view key, int64_t exptime) {
    return found_command(expect::touched, "touch ", key, exptime);
}

future<server_stats> text_transport::server_statistics() {
    try {
        check_open("(stats)");
    } catch (...) {
        return make_exception_future<server_stats>(std::current_exception());
    }
    _tx += "stats\r\n";
    return enqueue(expect::stats, {}).then([](reply r) { return std::move(r.stats); });
}

future<> text_transport::flush_all(int64_t delay) {
    try {
        check_open("(flush_all)");
    } catch (...) {
        return make_exception_future<>(std::current_exception());
    }
    _tx += "flush_all";
    if (delay != 0) {
        _tx += ' ';
        append_signed(_tx, delay);
    }
    _tx += "\r\n";
    return enqueue(expect::ok, {}).discard_result();
}

future<std::optional<uint64_t>> text_transport::delta(bool incr, std::string_view key, uint64_t delta) {
    try {
        check_open(key);
    } catch (...) {
        return make_exception_future<std::optional<uint64_t>>(std::current_exception());
    }
    _tx += incr ? "incr " : "decr ";
    _tx += key;
    _tx += ' ';
    append_number(_tx, delta);
    _tx += "\r\n";
    return enqueue(expect::number, {}).then([](reply r) {
        return r.found ? std::optional<uint64_t>(r.number) : std::nullopt;
    });
}

future<text_transport::reply> text_transport::enqueue(expect what, std::vector<std::string> keys) {
    auto& p = _pending.emplace_back();
    p.what = what;
    if (what == expect::values) {
        p.r.values.resize(keys.size());
    }
    p.keys = std::move(keys);
    if (_request_timeout.count()) {
        p.deadline = lowres_clock::now() + _request_timeout;
    }
    auto f = p.done.get_future();
    if (!_running) {
        _running = true;
        _sessions.enter();
        (void)session().then_wrapped([this](future<> f) {
            f.ignore_ready_future();
            _sessions.leave();
        });
    } else {
        wake();
    }
    return f;
}

void text_transport::wake() noexcept {
    if (_wake) {
        promise<> p = std::move(*_wake);
        _wake.reset();
        p.set_value();
    }
}

void text_transport::fail(std::exception_ptr ex) noexcept {
    if (_failed) {
        return;
    }
    _failed = true;
    _tx.clear();
    auto pending = std::move(_pending);
    _pending.clear();
    for (auto& p : pending) {
        p.done.set_exception(ex);
    }
    if (_sock) {
        _sock.abort();
    }
    wake();
}

future<> text_transport::session() {
    for (;;) {
        net::connected_socket s;
        try {
            net::tcp::connect_options o;
            o.timeout = _connect_timeout;
            s = co_await net::tcp::connect(_addr, o);
        } catch (const std::exception& e) {
            fail(std::make_exception_ptr(error(client_errc::connection, e.what())));
        }
        if (s) {
            ++_connects;
            _sock = s;
            if (_request_timeout.count()) {
                _watchdog.arm_periodic(
                    std::max<lowres_clock::duration>(_request_timeout / 4, std::chrono::milliseconds(10)));
            }
            auto in = s.input();
            auto out = s.output();
            future<> reader = read_loop(in);
            std::string batch;
            try {
                while (!_failed) {
                    if (_tx.empty()) {
                        if (_closing && _pending.empty()) {
                            co_await out.close();
                            break;
                        }
                        _wake.emplace();
                        co_await _wake->get_future();
                        continue;
                    }
                    batch.swap(_tx);
                    co_await out.write(std::string_view(batch));
                    batch.clear();
                    co_await out.flush();
                }
            } catch (const std::exception& e) {
                fail(std::make_exception_ptr(error(client_errc::connection, e.what())));
            }
            if (!_failed) {
                s.shutdown_input(); // closing: the reader sees the end of the stream
            }
            co_await std::move(reader);
            _watchdog.cancel();
            _sock = {};
        }
        _rx.clear();
        _failed = false;
        // Requests made while the broken connection wound down go out on a new one.
        if (_pending.empty() || _closing) {
            break;
        }
    }
    _running = false;
    if (_closing) {
        auto pending = std::move(_pending);
        _pending.clear();
        for (auto& p : pending) {
            p.done.set_exception(error(client_errc::bad_request, "kv client closed"));
        }
    }
}

future<> text_transport::read_loop(net::input_stream& in) {
    try {
        for (;;) {
            net::temporary_buffer b = co_await in.read();
            if (_failed) {
                co_return;
            }
            if (b.empty()) {
                if (_closing && _pending.empty()) {
                    co_return;
                }
                throw error(client_errc::connection, "connection closed by the server");
            }
            if (_rx.empty()) {
                size_t used = parse(b.view());
                _rx.assign(b.view().substr(used));
            } else {
                _rx.append(b.view());
                size_t used = parse(_rx);
                _rx.erase(0, used);
            }
            if (_closing && _pending.empty()) {
                wake();
            }
        }
    } catch (const client_error&) {
        fail(std::current_exception());
    } catch (const std::exception& e) {
        fail(std::make_exception_ptr(error(client_errc::connection, e.what())));
    }
}

void text_transport::finish_front(std::exception_ptr ex) {
    pending p = std::move(_pending.front());
    _pending.pop_front();
    if (ex) {
        p.done.set_exception(std::move(ex));
    } else {
        p.done.set_value(std::move(p.r));
    }
}

size_t text_transport::parse(std::string_view data) {
    size_t pos = 0;
    while (pos < data.size()) {
        if (_pending.empty()) {
            throw error(client_errc::connection,
                        "unexpected bytes from the server: '" + std::string(data.substr(pos, 40)) + "'");
        }
        size_t nl = data.find("\r\n", pos);
        if (nl == std::string_view::npos) {
            break;
        }
        std::string_view line = data.substr(pos, nl - pos);
        size_t used = nl + 2 - pos;
        if (!parse_line(line, data.substr(nl + 2), used)) {
            break;
        }
        pos += used;
    }
    return pos;
}

bool text_transport::parse_line(std::string_view line, std::string_view rest, size_t& used) {
    if (line == "ERROR" || line.starts_with("CLIENT_ERROR") || line.starts_with("SERVER_ERROR")) {
        finish_front(std::make_exception_ptr(error(client_errc::server, line)));
        return true;
    }
    pending& p = _pending.front();
    auto bad = [&] {
        return error(client_errc::connection, "unexpected reply '" + std::string(line.substr(0, 80)) + "'");
    };
    switch (p.what) {
    case expect::values: {
        if (line == "END") {
            finish_front(nullptr);
            return true;
        }
        if (!line.starts_with("VALUE ")) {
            throw bad();
        }
        // VALUE <key> <flags> <bytes> <cas>
        size_t at = 6;
        std::string_view key = token(line, at);
        uint64_t flags = 0, len = 0, cas = 0;
        if (!parse_u64(token(line, at), flags) || flags > UINT32_MAX || !parse_u64(token(line, at), len) ||
            !parse_u64(token(line, at), cas) || at != line.size()) {
            throw bad();
        }
        if (rest.size() < len + 2) {
            return false; // the value has not all arrived
        }
        if (rest.substr(len, 2) != "\r\n") {
            throw bad();
        }
        while (p.next_key < p.keys.size() && p.keys[p.next_key] != key) {
            ++p.next_key;
        }
        if (p.next_key == p.keys.size()) {
            throw error(client_errc::connection, "reply for a key not asked for: '" + std::string(key) + "'");
        }
        auto& v = p.r.values[p.next_key++].emplace();
        v.data.assign(rest.substr(0, len));
        v.flags = uint32_t(flags);
        v.cas = cas;
        used += len + 2;
        return true;
    }
    case expect::stored:
        if (line == "STORED") {
            p.r.outcome = store_outcome::stored;
        } else if (line == "NOT_STORED") {
            p.r.outcome = store_outcome::not_stored;
        } else if (line == "EXISTS") {
            p.r.outcome = store_outcome::exists;
        } else if (line == "NOT_FOUND") {
            p.r.outcome = store_outcome::not_found;
        } else {
            throw bad();
        }
        break;
    case expect::deleted:
    case expect::touched:
        if (line == (p.what == expect::deleted ? "DELETED" : "TOUCHED")) {
            p.r.found = true;
        } else if (line != "NOT_FOUND") {
            throw bad();
        }
        break;
    case expect::ok:
        if (line != "OK") {
            throw bad();
        }
        break;
    case expect::stats:
        if (line == "END") {
            break;
        }
        if (!parse_stat_line(line, p.r.stats)) {
            throw bad();
        }
        return true;
    case expect::number:
        if (line != "NOT_FOUND") {
            if (!parse_u64(line, p.r.number)) {
                throw bad();
            }
            p.r.found = true;
        }
        break;
    }
    finish_front(nullptr);
    return true;
}

future<> text_transport::close() {
    _closing = true;
    wake();
    return _sessions.close();
}

} // namespace shoal::kv::internal
