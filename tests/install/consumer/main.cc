// Uses an installed shoal through the <shoal/...> include prefix: an RPC round trip over TCP
// loopback between two shards, a scrape of its own Prometheus endpoint, the memcached parser and
// the RDMA device list. Prints "consumer ok" and exits 0 when everything behaved.
#include <shoal/core/app.hh>
#include <shoal/core/coroutine.hh>
#include <shoal/core/metrics.hh>
#include <shoal/core/smp.hh>
#include <shoal/kv/protocol/protocol.hh>
#include <shoal/net/http/prometheus.hh>
#include <shoal/net/rdma/device.hh>
#include <shoal/net/tcp/tcp.hh>
#include <shoal/net/transport.hh>
#include <shoal/rpc/client.hh>
#include <shoal/rpc/server.hh>

#include <cstdio>
#include <string>

using namespace shoal;

int add(int a, int b) {
    return a + b;
}

future<int> check() {
    int failures = 0;
    auto expect = [&failures](bool ok, const char* what) {
        if (!ok) {
            std::fprintf(stderr, "consumer: FAILED: %s\n", what);
            ++failures;
        }
    };

    // RPC over TCP loopback: the server on shard 0, the caller on shard 1.
    rpc::server srv(net::make_transport("tcp"));
    srv.register_handler<&add>();
    srv.listen(net::socket_address::parse("127.0.0.1:0"));
    auto addr = srv.local_address();
    int sum = co_await submit_to(1, [addr]() -> future<int> {
        rpc::client c(net::make_transport("tcp"));
        co_await c.connect(addr);
        int r = co_await c.call<&add>(2, 3);
        co_await c.close();
        co_return r;
    });
    expect(sum == 5, "rpc add(2, 3) == 5");
    co_await srv.stop();

    // A metric on shard 1, scraped from shard 0's endpoint over TCP.
    metrics::counter hits;
    metrics::metric_group group;
    co_await submit_to(1, [&] {
        group.add_counter("consumer_hits_total", "Hits.", hits);
        hits.add(7);
    });
    net::http::server http;
    net::http::add_prometheus_route(http);
    http.start(net::socket_address::parse("127.0.0.1:0"));
    auto s = co_await net::tcp::connect(http.local_address());
    auto in = s.input();
    auto out = s.output();
    co_await out.write("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    co_await out.flush();
    std::string reply;
    for (auto b = co_await in.read(); !b.empty(); b = co_await in.read()) {
        reply.append(b.get(), b.size());
    }
    co_await out.close();
    expect(reply.starts_with("HTTP/1.1 200"), "GET /metrics answers 200");
    expect(reply.find("consumer_hits_total{shard=\"1\"} 7\n") != std::string::npos,
           "shard 1's counter scraped");
    co_await http.stop();
    co_await submit_to(1, [&] { group.clear(); });

    // The memcached parser (kv) and the RDMA device list (empty without a device).
    kv::request req;
    auto parsed = kv::parse_request("get foo\r\n", req, {});
    expect(parsed.kind == kv::parse_result::ready && parsed.consumed == 9, "kv parses 'get foo'");
    std::printf("consumer: %zu RDMA device(s)\n", net::rdma::device_names().size());

    if (failures == 0) {
        std::printf("consumer ok\n");
    }
    co_return failures ? 1 : 0;
}

int main(int argc, char** argv) {
    app a("shoal-consumer", "an outside project built against an installed shoal");
    return a.run(argc, argv, check);
}
