#pragma once

// Helpers of the TCP tests: the shared runner and byte patterns (tests/support), a minimal echo
// handler, and stream reading helpers.

#include "core/coroutine.hh"
#include "core/future.hh"
#include "core/smp.hh"
#include "net/stream.hh"
#include "net/tcp/tcp.hh"
#include "support/run.hh"
#include "support/stream_pattern.hh"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include <sys/resource.h>

namespace shoal::tcp_test {

using namespace shoal::net;

using shoal::testing::make_pattern;
using shoal::testing::pattern_byte;
using shoal::testing::read_and_check;
using shoal::testing::run_in_shards;

/// Reads everything until end of stream into a string.
inline future<std::string> read_to_end(input_stream& in) {
    std::string out;
    for (;;) {
        temporary_buffer b = co_await in.read();
        if (b.empty()) {
            co_return out;
        }
        out.append(b.get(), b.size());
    }
}

/// Echoes what arrives until end of stream, then closes the output. Errors end the loop
/// quietly (they are what some tests provoke); returns the exception, if any.
inline future<std::exception_ptr> echo(connected_socket s) {
    auto in = s.input();
    auto out = s.output();
    std::exception_ptr error;
    try {
        for (;;) {
            temporary_buffer b = co_await in.read();
            if (b.empty()) {
                break;
            }
            co_await out.write(std::move(b));
            co_await out.flush();
        }
        co_await out.close();
    } catch (...) {
        error = std::current_exception();
    }
    co_return error;
}

/// Open file descriptors of this process.
inline size_t open_fds() {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
        ++n;
    }
    return n;
}

/// Raises the soft limit of open files to at least `n` (up to the hard limit); returns the
/// limit now in force.
inline rlim_t raise_nofile(rlim_t n) {
    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < n) {
        rl.rlim_cur = std::min(n, rl.rlim_max);
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur;
}

/// Sets a TCP configuration for one test and restores the previous one.
struct scoped_config {
    tcp::config saved = tcp::get_config();
    explicit scoped_config(const tcp::config& c) { tcp::set_config(c); }
    ~scoped_config() { tcp::set_config(saved); }
};

/// A connected pair over 127.0.0.1: the connecting side and the accepted one.
struct loopback {
    connected_socket client;
    connected_socket server;
};

/// Listens on an ephemeral loopback port, connects to it and accepts.
inline future<loopback> connect_loopback() {
    auto ss = tcp::listen(socket_address::parse("127.0.0.1:0"));
    auto accepted = ss.accept();
    connected_socket c = co_await tcp::connect(ss.local_address());
    accept_result ar = co_await std::move(accepted);
    co_return loopback{std::move(c), std::move(ar.connection)};
}

} // namespace shoal::tcp_test
