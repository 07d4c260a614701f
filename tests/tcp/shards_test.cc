// Accepting across shards: every shard listens on the same port (SO_REUSEPORT).

#include "test_util.hh"

#include "core/future_util.hh"
#include "core/gate.hh"
#include "core/sharded.hh"

#include <gtest/gtest.h>

#include <set>

using namespace shoal;
using namespace shoal::net;
using namespace shoal::tcp_test;

namespace {

/// Answers every connection with one byte, the number of the shard that accepted it.
class shard_id_server {
public:
    void start(socket_address addr) {
        listen_options o;
        o.reuse_port = true;
        _ss = tcp::listen(addr, o);
        _loop = accept_loop();
    }
    socket_address local_address() const { return _ss.local_address(); }
    unsigned accepted() const { return _accepted; }
    future<> stop() {
        _ss.abort_accept();
        co_await std::move(_loop);
        co_await _gate.close();
    }

private:
    future<> accept_loop() {
        for (;;) {
            accept_result ar;
            try {
                ar = co_await _ss.accept();
            } catch (...) {
                co_return; // aborted
            }
            ++_accepted;
            _gate.enter();
            (void)answer(std::move(ar.connection)).finally([this] { _gate.leave(); });
        }
    }
    static future<> answer(connected_socket s) {
        auto out = s.output();
        co_await out.write(std::string(1, char('0' + this_shard_id())));
        co_await out.close();
    }

    server_socket _ss;
    future<> _loop = make_ready_future<>();
    gate _gate;
    unsigned _accepted = 0;
};

future<char> ask(socket_address addr) {
    connected_socket s = co_await tcp::connect(addr);
    auto in = s.input();
    temporary_buffer b = co_await in.read_exactly(1);
    co_return b[0];
}

future<> accept_across_two_shards() {
    EXPECT_EQ(shard_count(), 2u);
    sharded<shard_id_server> servers;
    co_await servers.start();
    servers.local().start(socket_address::parse("127.0.0.1:0"));
    auto addr = servers.local().local_address();
    co_await servers.invoke_on(1, [addr](shard_id_server& s) { s.start(addr); });
    // 64 connections from shard 0: the kernel hashes each 4-tuple to one of the two listeners
    // (all 64 on one shard has probability 2^-63).
    std::vector<future<char>> answers;
    for (int i = 0; i < 64; ++i) {
        answers.push_back(ask(addr));
    }
    auto got = co_await when_all_succeed(std::move(answers));
    std::set<char> shards(got.begin(), got.end());
    EXPECT_EQ(shards, (std::set<char>{'0', '1'}));
    unsigned total =
        co_await servers.map_reduce([](shard_id_server& s) { return s.accepted(); }, 0u, std::plus<>());
    EXPECT_EQ(total, 64u);
    co_await servers.stop();
}

} // namespace

TEST(TcpShards, AcceptAcrossTwoShards) {
    EXPECT_EQ(run_in_shards(2, accept_across_two_shards), 0);
}
