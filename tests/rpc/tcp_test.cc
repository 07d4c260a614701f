// The core RPC suite (rpc_suite.hh) over TCP on loopback, plus registration errors and hostile
// servers.

#include "rpc_suite.hh"

#include "support/patience.hh"
#include "support/run.hh"

#include <gtest/gtest.h>

using namespace shoal;
using namespace shoal::rpc_test;

namespace shoal::rpc_test {

/// The suite's transport here: TCP on the loopback, each listener on a port of its own.
struct over_tcp {
    /// Runs `body` on a fresh engine of `smp` shards.
    static void run(std::function<future<>(rpc_env&)> body, unsigned smp = 1) {
        EXPECT_EQ(shoal::testing::run_in_shards(smp,
                                                [body]() -> future<> {
                                                    rpc_env env{net::make_transport("tcp"), [] {
                                                                    return net::socket_address::parse(
                                                                        "127.0.0.1:0");
                                                                }};
                                                    co_await body(env);
                                                }),
                  0);
    }
};

INSTANTIATE_TYPED_TEST_SUITE_P(rpc_tcp, core_suite, ::testing::Types<over_tcp>);

} // namespace shoal::rpc_test

namespace {

/// The instantiation above holds every case of the suite (a case defined but not registered
/// fails at start-up; this catches one removed from both).
TEST(rpc_tcp, every_suite_case_has_a_test) {
    const ::testing::TestSuite* suite = nullptr;
    const ::testing::UnitTest& all = *::testing::UnitTest::GetInstance();
    for (int i = 0; i < all.total_test_suite_count(); ++i) {
        if (std::string_view(all.GetTestSuite(i)->name()) == "rpc_tcp/core_suite/0") {
            suite = all.GetTestSuite(i);
        }
    }
    ASSERT_NE(suite, nullptr);
    EXPECT_EQ(suite->total_test_count(), 14);
}

TEST(rpc_server, duplicate_verbs_are_refused_at_registration) {
    rpc::server s;
    s.register_handler<&add>();
    EXPECT_THROW(s.register_handler<&add>(), rpc::duplicate_verb_error);
    // Overloads share a qualified name, hence a verb id.
    s.register_handler<static_cast<int32_t (*)(int32_t)>(&versions::lookup)>();
    EXPECT_THROW((s.register_handler<static_cast<int32_t (*)(std::string)>(&versions::lookup)>()),
                 rpc::duplicate_verb_error);
    static_assert(rpc::function_name<&add>() == "shoal::rpc_test::add");
    static_assert(rpc::function_name<&gatekeeper::wait_here>() == "shoal::rpc_test::gatekeeper::wait_here");
}

TEST(rpc_client, calls_without_a_connection_fail_cleanly) {
    EXPECT_EQ(shoal::testing::run_in_shard([]() -> future<> {
                  rpc::client c(net::make_transport("tcp"));
                  try {
                      co_await c.call<&add>(1, 2);
                      ADD_FAILURE() << "no error";
                  } catch (const rpc::connection_error&) {
                  }
                  try {
                      // Nothing listens on this port of the loopback (bound and closed at once).
                      auto ss =
                          net::make_transport("tcp").listen(net::socket_address::parse("127.0.0.1:0"), {});
                      auto addr = ss.local_address();
                      ss.abort_accept();
                      ss = {};
                      co_await c.connect(addr);
                      ADD_FAILURE() << "connected to nothing";
                  } catch (const rpc::connection_error&) {
                  }
              }),
              0);
}

/// What a hostile server answers a call with.
struct hostile_answer {
    const char* name;
    std::function<net::temporary_buffer()> reply; // null: hang up instead
    const char* error;                            // in the call's error
};

/// The hostile server: reads one whole request, then answers as `a` says and hangs up.
future<> answer_once(net::server_socket& listener, const hostile_answer& a) {
    net::accept_result r = co_await listener.accept();
    net::connected_socket s = std::move(r.connection);
    net::input_stream in = s.input();
    net::output_stream out = s.output();
    net::temporary_buffer head = co_await in.read_exactly(rpc::frame_header::size);
    auto h = rpc::frame_header::decode(head.get(), 1 << 20);
    (void)co_await in.read_exactly(h.body_size());
    if (a.reply) {
        co_await out.write(a.reply());
        co_await out.flush();
    }
    co_await out.close();
}

/// A client's calls against a server that answers `a`.
future<> call_a_hostile_server(const hostile_answer& a) {
    auto tcp = net::make_transport("tcp");
    net::server_socket listener = tcp.listen(net::socket_address::parse("127.0.0.1:0"), {});
    future<> served = answer_once(listener, a);
    rpc::client c(tcp);
    co_await c.connect(listener.local_address());
    try {
        (void)co_await c.call<&add>(1, 2);
        ADD_FAILURE() << "the call succeeded";
    } catch (const rpc::connection_error& e) {
        EXPECT_NE(std::string(e.what()).find(a.error), std::string::npos) << e.what();
    }
    EXPECT_FALSE(c.connected());
    try {
        (void)co_await with_timeout(steady_clock_type::now() + patience, c.call<&add>(3, 4));
        ADD_FAILURE() << "a later call succeeded";
    } catch (const rpc::connection_error&) {
    }
    EXPECT_EQ(c.in_flight(), 0u);
    co_await c.close();
    co_await std::move(served);
    listener.abort_accept();
}

/// A server that answers a call with a frame no client may get (a request), with bytes that are
/// not a frame, or that hangs up: the pending call fails with a connection_error that says
/// which, and so does every later call, at once.
TEST(rpc_client, a_hostile_server_fails_calls_with_a_clear_error) {
    const std::vector<hostile_answer> answers = {
        {"a request frame",
         [] {
             auto f = rpc::make_frame(rpc::frame_type::request, int32_t(7));
             f.header.verb = rpc::verb_id<&add>;
             f.header.signature = rpc::signature_hash<&add>;
             f.header.encode(f.head.get_write());
             return std::move(f.head);
         },
         "protocol error from the server: a client received a request frame"},
        {"bytes that are not a frame",
         [] { return net::temporary_buffer::copy_of(std::string(rpc::frame_header::size, 'x')); },
         "protocol error from the server"},
        {"a hang-up", nullptr, "connection closed by the server"},
    };
    for (const hostile_answer& a : answers) {
        SCOPED_TRACE(a.name);
        EXPECT_EQ(shoal::testing::run_in_shard([&a] { return call_a_hostile_server(a); }), 0);
    }
}

} // namespace
