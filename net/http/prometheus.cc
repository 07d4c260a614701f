#include "net/http/prometheus.hh"

#include "core/metrics.hh"
#include "core/prometheus_format.hh"

namespace shoal::net::http {

void add_prometheus_route(server& s, std::string path) {
    s.add_route("GET", std::move(path), [](const request&) {
        return metrics::collect_all_shards().then([](std::vector<metrics::family> families) {
            response r;
            r.content_type = metrics::prometheus_content_type;
            r.body = metrics::format_prometheus(families);
            return r;
        });
    });
}

} // namespace shoal::net::http
