#include "apps/common/metrics.hh"

#include "apps/common/options.hh"

#include "core/coroutine.hh"
#include "core/log.hh"
#include "core/metrics.hh"
#include "core/reactor_metrics.hh"
#include "core/sharded.hh"
#include "net/http/prometheus.hh"
#include "net/http/server.hh"
#include "net/rdma/metrics.hh"
#include "net/socket_address.hh"
#include "net/tcp/metrics.hh"

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace shoal::apps {

namespace {

/// One shard's published layer metrics.
struct layer_metrics {
    metrics::metric_group reactor = publish_reactor_metrics();
    metrics::metric_group tcp = net::tcp::publish_metrics();
    metrics::metric_group rdma = net::rdma::publish_metrics();
};

} // namespace

void add_metrics_options(app& a) {
    a.add_option("prometheus-port",
                 "serve Prometheus metrics on this TCP port (0: any free port; default off)");
    a.add_option("prometheus-address",
                 "address the Prometheus endpoint listens on (0.0.0.0: every interface)", "127.0.0.1");
    a.add_option("prometheus-max-connections",
                 "connections the Prometheus endpoint serves at once (past it, the one waiting longest "
                 "for a request is closed)",
                 std::to_string(default_metrics_max_connections));
    a.add_option("prometheus-head-timeout",
                 "seconds a request head may take to arrive on the Prometheus endpoint", "10");
    a.add_option("prometheus-idle-timeout",
                 "seconds a Prometheus connection may stay silent before it is closed", "30");
}

size_t metrics_max_connections(const app& a) {
    if (!a.has("prometheus-port")) {
        return 0;
    }
    uint64_t n = a.get_size("prometheus-max-connections");
    if (n == 0 || n > 65536) {
        throw std::invalid_argument("--prometheus-max-connections " + a.get("prometheus-max-connections") +
                                    ": 1..65536");
    }
    return size_t(n);
}

future<int> with_metrics(const app& a, std::function<future<int>()> main) {
    sharded<layer_metrics> layers;
    co_await layers.start();
    std::unique_ptr<net::http::server> http;
    if (a.has("prometheus-port")) {
        std::exception_ptr failed;
        try {
            uint64_t port = a.get_size("prometheus-port");
            if (port > 65535) {
                throw std::invalid_argument("--prometheus-port " + a.get("prometheus-port") +
                                            ": a port is 0..65535");
            }
            auto addr = net::socket_address::from_host_port(a.get("prometheus-address"), uint16_t(port));
            net::http::server_limits limits;
            limits.max_connections = metrics_max_connections(a);
            limits.head_timeout = std::chrono::duration_cast<steady_clock_type::duration>(
                seconds_of(a, "prometheus-head-timeout"));
            limits.idle_timeout = std::chrono::duration_cast<steady_clock_type::duration>(
                seconds_of(a, "prometheus-idle-timeout"));
            if (limits.head_timeout <= steady_clock_type::duration::zero() ||
                limits.idle_timeout <= steady_clock_type::duration::zero()) {
                throw std::invalid_argument(
                    "--prometheus-head-timeout and --prometheus-idle-timeout: above 0");
            }
            http = std::make_unique<net::http::server>(limits);
            net::http::add_prometheus_route(*http);
            http->start(addr);
        } catch (...) {
            failed = std::current_exception();
        }
        if (failed) {
            http.reset(); // never started: nothing to stop
            co_await layers.stop();
            std::fprintf(stderr, "prometheus endpoint: %s\n", fmt::format("{}", failed).c_str());
            co_return 2;
        }
        fmt::print("Prometheus metrics on http://{}/metrics\n", http->local_address().to_string());
        std::fflush(stdout);
    }
    std::exception_ptr failed;
    int rc = 0;
    try {
        rc = co_await main();
    } catch (...) {
        failed = std::current_exception();
    }
    if (http) {
        co_await http->stop();
    }
    co_await layers.stop();
    if (failed) {
        std::rethrow_exception(failed);
    }
    co_return rc;
}

future<> shard_metric_groups::publish(std::function<metrics::metric_group()> make) {
    _groups.resize(shard_count());
    for (unsigned s = 0; s < shard_count(); ++s) {
        co_await submit_to(s, [this, &make, s] { _groups[s] = make(); });
    }
}

future<> shard_metric_groups::clear() {
    for (unsigned s = 0; s < _groups.size(); ++s) {
        co_await submit_to(s, [this, s] { _groups[s].clear(); });
    }
}

} // namespace shoal::apps
