#pragma once

#include "core/gate.hh"
#include "core/timer.hh"
#include "kv/client/internal/client_transport.hh"
#include "net/socket_address.hh"
#include "net/stream.hh"

#include <chrono>
#include <deque>
#include <memory>
#include <optional>

namespace shoal::kv::internal {

/// `client_transport` over one TCP connection speaking memcached's text protocol. Connects on
/// the first request (and again on the first request after the connection broke); requests are
/// written as they come, batched while an earlier write is in progress, and replies are matched
/// to requests in order. When the connection breaks, every request in flight fails with a
/// `client_error` of kind `connection`; a reply that does not parse breaks the connection too
/// (the stream can no longer be trusted). Call `close()` and wait for it before destroying.
class text_transport final : public client_transport {
public:
    /// A transport to `addr`, server number `index` in the client's list (for errors). A request
    /// not answered within `request_timeout` (0: no limit) breaks the connection.
    text_transport(net::socket_address addr, unsigned index, std::chrono::milliseconds connect_timeout,
                   std::chrono::milliseconds request_timeout);
    ~text_transport() override;

    future<std::vector<std::optional<fetched_value>>> get(std::vector<std::string> keys) override;
    future<store_outcome> store(store_op op, std::string_view key, std::string_view value, uint32_t flags,
                                int64_t exptime, uint64_t cas_unique) override;
    /// `store` of a copy of `src`'s bytes (the text protocol sends them from its write buffer).
    future<store_outcome> store_from(store_op op, std::string_view key, net::rdma::local_span src,
                                     uint32_t flags, int64_t exptime, uint64_t cas_unique) override;
    /// `get`, the value copied to the start of `dst`.
    future<std::optional<placed_value>> get_into(std::string_view key, net::rdma::local_span dst) override;
    future<bool> remove(std::string_view key) override;
    future<std::optional<uint64_t>> delta(bool incr, std::string_view key, uint64_t delta) override;
    future<bool> touch(std::string_view key, int64_t exptime) override;
    future<std::optional<fetched_value>> gat(std::string_view key, int64_t exptime) override;
    future<server_stats> server_statistics() override;
    future<> flush_all(int64_t delay) override;
    future<> close() override;

    /// Connections made so far (tests: reconnection after a failure).
    unsigned connects() const noexcept { return _connects; }

private:
    /// What a request expects back.
    enum class expect : uint8_t { values, stored, deleted, number, touched, ok, stats };
    /// The parsed reply of one request.
    struct reply {
        std::vector<std::optional<fetched_value>> values; ///< expect::values
        store_outcome outcome = store_outcome::stored;    ///< expect::stored
        bool found = false;                               ///< deleted / number / touched
        uint64_t number = 0;                              ///< expect::number
        server_stats stats;                               ///< expect::stats
    };
    /// A request written (or about to be) and not answered yet.
    struct pending {
        expect what;
        std::vector<std::string> keys; ///< expect::values: the keys asked for, in order
        size_t next_key = 0;           ///< expect::values: first key not matched yet
        lowres_clock::time_point deadline;
        reply r;
        promise<reply> done;
    };

    future<reply> enqueue(expect what, std::vector<std::string> keys);
    /// `gets keys` or, with `touch`, `gats touch keys`: the values in the order of `keys`.
    future<std::vector<std::optional<fetched_value>>> fetch(std::vector<std::string> keys,
                                                            std::optional<int64_t> touch);
    /// `verb key[ arg]`, answered by a found word or NOT_FOUND (delete, touch): whether found.
    future<bool> found_command(expect what, std::string_view verb, std::string_view key,
                               std::optional<int64_t> arg);
    void check_open(std::string_view key);
    future<> session();
    future<> read_loop(net::input_stream& in);
    /// Consumes complete replies at the front of `data`; returns the bytes consumed. Throws
    /// `client_error` (connection) on a reply that makes no sense.
    size_t parse(std::string_view data);
    /// Parses one line of the front request's reply; false when it is not complete yet.
    bool parse_line(std::string_view line, std::string_view rest, size_t& used);
    void finish_front(std::exception_ptr ex);
    void fail(std::exception_ptr ex) noexcept;
    void wake() noexcept;
    void check_deadline() noexcept;
    client_error error(client_errc code, std::string_view what) const;

    net::socket_address _addr;
    unsigned _index;
    std::chrono::milliseconds _connect_timeout;
    std::chrono::milliseconds _request_timeout;
    timer<lowres_clock> _watchdog; ///< checks the oldest request's deadline while connected
    std::deque<pending> _pending;
    std::string _tx; ///< requests not handed to the socket yet
    std::string _rx; ///< reply bytes not consumed yet
    std::optional<promise<>> _wake;
    net::connected_socket _sock;
    gate _sessions;
    bool _running = false; ///< a session (connection) is active
    bool _failed = false;  ///< the active session broke; it is winding down
    bool _closing = false;
    unsigned _connects = 0;
};

} // namespace shoal::kv::internal
