#include "net/tcp/metrics.hh"

#include "net/stream.hh"
#include "net/tcp/tcp.hh"

namespace shoal::net::tcp {

namespace {

constexpr metrics::stats_field<stats> counters[] = {
    {"shoal_tcp_accepted_total", "TCP connections accepted.", &stats::accepted},
    {"shoal_tcp_accept_errors_total",
     "Accepts that failed for want of file descriptors or memory (the listener backed off and retried).",
     &stats::accept_errors},
    {"shoal_tcp_refused_connections_total",
     "Connections accepted with the reserve descriptor, answered with the refusal message and closed.",
     &stats::refused_connections},
    {"shoal_tcp_connected_total", "Outgoing TCP connections established.", &stats::connected},
    {"shoal_tcp_aborts_total", "TCP connections broken by abort() (shutdown deadlines).", &stats::aborts},
    {"shoal_tcp_received_bytes_total", "Bytes received over TCP.", &stats::recv_bytes},
    {"shoal_tcp_receive_completions_total", "Receive completions carrying data.", &stats::recv_completions},
    {"shoal_tcp_receive_arms_total", "Receives submitted (each completes once).", &stats::recv_arms},
    {"shoal_tcp_zero_copy_receives_total", "Received buffers handed to readers without a copy.",
     &stats::zero_copy_buffers},
    {"shoal_tcp_copied_receives_total", "Received buffers copied because the buffer ring ran low.",
     &stats::copied_buffers},
    {"shoal_tcp_buffer_shortages_total", "Receives stopped by an empty buffer ring (ENOBUFS).",
     &stats::buffer_shortages},
    {"shoal_tcp_paused_receives_total", "Receives paused because the reader fell behind.",
     &stats::recv_paused},
    {"shoal_tcp_sends_total", "Send requests submitted.", &stats::sends},
    {"shoal_tcp_vectored_sends_total", "Sends that carried several buffers (sendmsg).",
     &stats::vectored_sends},
    {"shoal_tcp_sent_bytes_total", "Bytes sent over TCP.", &stats::send_bytes},
    {"shoal_tcp_short_sends_total", "Sends the kernel completed only partly.", &stats::short_sends},
};

} // namespace

metrics::metric_group publish_metrics() {
    metrics::metric_group g;
    metrics::add_stats_counters(g, counters, &shard_stats);
    g.add_counter("shoal_stream_copies_total", "memcpy calls made by the stream layer (any transport).",
                  []() -> std::optional<double> { return double(stream_copies().copies); });
    g.add_counter("shoal_stream_copied_bytes_total", "Bytes the stream layer copied (any transport).",
                  []() -> std::optional<double> { return double(stream_copies().bytes); });
    return g;
}

} // namespace shoal::net::tcp
