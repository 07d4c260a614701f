// kv's RDMA transport against a server that stops answering or dies, in the Soft-RoCE
// guest: the server is a child process (shoal-kv's two front ends on 2 shards) paused with
// SIGSTOP or killed with SIGKILL. A paused server fails the requests in flight with a clear
// error after the request timeout (no hang) and serves again once resumed; a dead one is
// reconnected on the next request, with an exponential back-off between failed attempts, and a
// server started again on the same port is used as soon as the back-off allows.
#include "rdma_kv_util.hh"

#include <fcntl.h>

using namespace shoal;
using namespace shoal::rdma_test;
using namespace shoal::kv_test;

namespace {

/// A server child on `port` (+1), ready to serve.
future<child_process> start_server(uint16_t port) {
    child_process c = spawn_child("server", addr(port));
    RDMA_CHECK(co_await eventually([&] { return c.read().first == 1; }));
    co_return std::move(c);
}

/// The error a request fails with ("" when it succeeds).
template <typename F>
future<std::string> error_of(F f) {
    try {
        co_await f();
    } catch (const kv::client_error& e) {
        RDMA_CHECK(e.code() == kv::client_errc::connection);
        co_return std::string(e.what());
    }
    co_return std::string();
}

bool contains(const std::string& s, std::string_view what) {
    return s.find(what) != std::string::npos;
}

} // namespace

TEST(kv_rdma_reconnect, a_paused_server_fails_requests_after_the_timeout_and_serves_again_when_resumed) {
    int rc = run_rdma(1, []() -> future<> {
        const uint16_t port = next_port();
        next_port();
        child_process server = co_await start_server(port);
        // The request timeout is the subject, but it also bounds the requests to the healthy
        // server before and after the pause: 5 s gives those room in the sanitizer build in the
        // guest on a busy host, at the cost of 5 s of waiting for the paused server.
        kv::rdma_client_options o;
        o.request_timeout = 5000ms;
        kv::internal::rdma_transport t(addr(port), 0, patience, o);
        std::exception_ptr failed;
        try {
            const std::string small = value_of("small", 1, 100), large = value_of("large", 1, 64 << 10);
            RDMA_CHECK(co_await t.store(kv::internal::store_op::set, "small", small, 0, 0, 0) ==
                       kv::store_outcome::stored);
            RDMA_CHECK(co_await t.store(kv::internal::store_op::set, "large", large, 0, 0, 0) ==
                       kv::store_outcome::stored);
            RDMA_CHECK(co_await fetch(t, "small") == small);
            co_await server.pause();
            // Control GET, inline PUT, granted PUT and DEL in flight to the stopped server.
            t.forget_locations();
            const auto sent = std::chrono::steady_clock::now();
            auto get = error_of([&] { return t.get_one("small"); });
            auto put =
                error_of([&] { return t.store(kv::internal::store_op::set, "small", small, 0, 0, 0); });
            auto big =
                error_of([&] { return t.store(kv::internal::store_op::set, "large", large, 0, 0, 0); });
            auto del = error_of([&] { return t.remove("other"); });
            for (auto* f : {&get, &put, &big, &del}) {
                std::string e = co_await std::move(*f);
                EXPECT_TRUE(contains(e, "no reply within 5000 ms")) << "'" << e << "'";
            }
            const double waited =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
            std::printf("4 requests to a stopped server failed after %.2f s\n", waited);
            // (No upper bound: the errors above name the timeout, so it ended the wait; how much
            // later than 5 s they came depends on the host.)
            EXPECT_GE(waited, 4.9) << "failed before the timeout";
            EXPECT_GE(t.stats().timeouts, 1u);
            // Resumed: the next request connects again and is answered; nothing was lost.
            ::kill(server.pid, SIGCONT);
            const uint64_t attempts = t.stats().connect_attempts;
            RDMA_CHECK(co_await fetch(t, "small") == small);
            RDMA_CHECK(co_await fetch(t, "large") == large);
            EXPECT_EQ(t.stats().connect_attempts, attempts + 1);
            EXPECT_EQ(t.backoff().count(), 0);
        } catch (...) {
            failed = std::current_exception();
        }
        ::kill(server.pid, SIGCONT);
        co_await t.close();
        if (failed) {
            std::rethrow_exception(failed);
        }
    });
    EXPECT_EQ(rc, 0);
}

TEST(kv_rdma_reconnect, a_dead_server_is_retried_with_exponential_back_off_until_it_is_back) {
    int rc = run_rdma(1, []() -> future<> {
        const uint16_t port = next_port();
        next_port();
        std::optional<child_process> server(co_await start_server(port));
        // Connecting to a port nobody listens on is refused at once: the connect timeout only
        // bounds the attempts that succeed. The request timeout also bounds the requests to the
        // healthy server (first and last), so it has room.
        kv::rdma_client_options o;
        o.request_timeout = 10000ms;
        o.reconnect_backoff_min = 300ms;
        o.reconnect_backoff_max = 1200ms;
        kv::internal::rdma_transport t(addr(port), 0, patience, o);
        std::exception_ptr failed;
        try {
            const std::string v = value_of("k", 1, 100);
            RDMA_CHECK(co_await t.store(kv::internal::store_op::set, "k", v, 0, 0, 0) ==
                       kv::store_outcome::stored);
            co_await server->kill_now();
            server.reset();
            // The dead server's connections break (its QPs are gone): a request fails.
            bool broke = false;
            for (int i = 0; i < 100 && !broke; ++i) {
                t.forget_locations();
                broke = !(co_await error_of([&] { return t.get_one("k"); })).empty();
            }
            RDMA_CHECK(broke);
            std::vector<long> backoffs;
            if (t.stats().connect_failures > 0) { // that request already found nobody listening
                backoffs.push_back(long(t.backoff().count()));
            }
            // Attempts while nobody listens fail; between them, requests fail at once, and the
            // wait doubles up to its maximum.
            while (backoffs.size() < 4) {
                const uint64_t attempts = t.stats().connect_attempts;
                const auto asked = std::chrono::steady_clock::now();
                std::string e = co_await error_of([&] { return t.get_one("k"); });
                RDMA_CHECK(!e.empty());
                if (t.stats().connect_attempts == attempts) {
                    RDMA_CHECK(contains(e, "next attempt in")); // refused during the back-off
                    co_await sleep(t.backoff() / 4);
                    continue;
                }
                backoffs.push_back(long(t.backoff().count()));
                // At once again: refused without an attempt. Asked only when well within the
                // back-off: a host that stalled this side past it makes the next request an
                // attempt, rightly (the loop then records its back-off).
                if (std::chrono::steady_clock::now() - asked + 50ms < t.backoff()) {
                    e = co_await error_of([&] { return t.get_one("k"); });
                    EXPECT_TRUE(contains(e, "next attempt in")) << "'" << e << "'";
                    EXPECT_EQ(t.stats().connect_attempts, attempts + 1);
                }
            }
            std::printf(
                "back-offs after failed attempts: %ld %ld %ld %ld ms; %lu requests refused meanwhile\n",
                backoffs[0], backoffs[1], backoffs[2], backoffs[3], t.stats().backoff_refusals);
            const std::vector<long> doubling = {300, 600, 1200, 1200, 1200};
            EXPECT_TRUE(std::equal(backoffs.begin(), backoffs.end(), doubling.begin()) ||
                        std::equal(backoffs.begin(), backoffs.end(), doubling.begin() + 1))
                << backoffs[0] << " " << backoffs[1] << " " << backoffs[2] << " " << backoffs[3];
            // The server is back on the same port: after the back-off the next request connects.
            server.emplace(co_await start_server(port));
            co_await sleep(t.backoff() + 100ms);
            RDMA_CHECK(co_await t.store(kv::internal::store_op::set, "k", v, 0, 0, 0) ==
                       kv::store_outcome::stored);
            RDMA_CHECK(co_await fetch(t, "k") == v);
            EXPECT_EQ(t.backoff().count(), 0) << "a success resets the back-off";
        } catch (...) {
            failed = std::current_exception();
        }
        co_await t.close();
        if (failed) {
            std::rethrow_exception(failed);
        }
    });
    EXPECT_EQ(rc, 0);
}

// --- the server (child process)

namespace {

int peer_main(const std::string& mode_and_file, const std::string& address) {
    auto comma = mode_and_file.find(',');
    if (mode_and_file.substr(0, comma) != "server") {
        return 2;
    }
    std::string file = mode_and_file.substr(comma + 1);
    uint16_t port = net::socket_address::parse(address).port();
    smp_options so;
    so.smp = 2;
    so.pin = false;
    return run_shards(so, [&]() -> future<int> {
        co_await rdma::start(test_options());
        static rdma_kv kvs;
        co_await kvs.start({}, size_t(8) << 20, port);
        int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        (void)::write(fd, "1 0\n", 4);
        ::close(fd);
        for (;;) { // until killed
            co_await sleep(1s);
        }
    });
}

} // namespace

int main(int argc, char** argv) {
    return test_or_peer_main(argc, argv, peer_main);
}
