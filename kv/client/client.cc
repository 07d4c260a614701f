#include "kv/client/client.hh"

#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "kv/client/internal/rdma_transport.hh"
#include "kv/client/internal/text_transport.hh"
#include "kv/store/internal/record.hh"
#include "net/rdma/context.hh"
#include "net/rdma/memory_pool.hh"

#include <stdexcept>

namespace shoal::kv {

namespace {

/// Keys per get command: keeps a request line well below servers' line limits.
constexpr size_t keys_per_get = 200;

std::vector<std::unique_ptr<internal::client_transport>> make_transports(const client_config& cfg) {
    if (cfg.servers.empty()) {
        throw std::invalid_argument("kv::client: no servers configured");
    }
    std::vector<std::unique_ptr<internal::client_transport>> out;
    for (unsigned i = 0; i < cfg.servers.size(); ++i) {
        const auto& s = cfg.servers[i];
        auto addr = net::socket_address::from_host_port(s.host, s.port);
        if (s.transport == endpoint_transport::rdma) {
            rdma_client_options o = cfg.rdma;
            if (o.request_timeout.count() == 0) {
                o.request_timeout = cfg.request_timeout;
            }
            out.push_back(std::make_unique<internal::rdma_transport>(addr, i, cfg.connect_timeout, o));
        } else {
            out.push_back(std::make_unique<internal::text_transport>(addr, i, cfg.connect_timeout,
                                                                     cfg.request_timeout));
        }
    }
    return out;
}

/// The `length` bytes at `offset` of `b` as a span holding `b`; a `bad_request` error when `b` is
/// empty, not from this shard's pool or too short.
net::rdma::local_span registered_span(const net::rdma::buffer& b, size_t offset, size_t length) {
    auto refuse = [](const std::string& why) {
        throw client_error(client_errc::bad_request, 0, "kv registered buffer: " + why);
    };
    if (!b) {
        refuse("empty");
    }
    auto* ctx = net::rdma::shard_context::local_or_null();
    if (!ctx || !ctx->pool().lkey_of(b.data(), b.capacity())) {
        refuse("not from this shard's RDMA pool (another shard's, or RDMA not started here)");
    }
    if (offset > b.capacity() || length > b.capacity() - offset || length > UINT32_MAX) {
        refuse(std::to_string(length) + " bytes at offset " + std::to_string(offset) + " exceed its " +
               std::to_string(b.capacity()));
    }
    return net::rdma::span_of(b, offset, length);
}

} // namespace

size_t get_into_capacity(size_t key_len, size_t value_len) noexcept {
    return record::bytes(key_len, value_len);
}

void check_key(std::string_view key) {
    if (key.empty() || key.size() > 250) {
        throw client_error(client_errc::bad_request, 0,
                           "kv key of " + std::to_string(key.size()) + " bytes (must be 1 to 250)");
    }
    for (char c : key) {
        if (uint8_t(c) <= ' ' || c == 0x7f) {
            throw client_error(client_errc::bad_request, 0,
                               "kv key '" + std::string(key.substr(0, 60)) +
                                   "' has a space or control character");
        }
    }
}

client::client(client_config cfg)
    : _servers(make_transports(cfg))
    , _ring(cfg.servers, cfg.distribution) {}

client::~client() = default;

template <typename Call>
auto client::on_server_of(std::string_view key, Call call) {
    return futurize_invoke([&] {
        check_key(key);
        return call(*_servers[_ring.server_of(key)]);
    });
}

future<std::optional<fetched_value>> client::get(std::string_view key) {
    return on_server_of(key, [&](internal::client_transport& s) { return s.get_one(key); });
}

future<std::vector<std::optional<fetched_value>>> client::get_many(std::vector<std::string> keys) {
    for (const auto& k : keys) {
        check_key(k); // a coroutine: the exception fails the returned future
    }
    // Which request answers each key: (request, position in it).
    std::vector<std::vector<std::string>> batches;
    std::vector<unsigned> batch_server;
    std::vector<std::pair<unsigned, unsigned>> where(keys.size());
    std::vector<int> open(_servers.size(), -1); // the batch of each server being filled
    for (size_t i = 0; i < keys.size(); ++i) {
        unsigned s = _ring.server_of(keys[i]);
        if (open[s] < 0 || batches[open[s]].size() == keys_per_get) {
            open[s] = int(batches.size());
            batches.emplace_back();
            batch_server.push_back(s);
        }
        where[i] = {unsigned(open[s]), unsigned(batches[open[s]].size())};
        batches[open[s]].push_back(keys[i]);
    }
    std::vector<future<std::vector<std::optional<fetched_value>>>> sent;
    for (size_t b = 0; b < batches.size(); ++b) {
        sent.push_back(_servers[batch_server[b]]->get(std::move(batches[b])));
    }
    auto done = co_await when_all(std::move(sent));
    std::vector<std::vector<std::optional<fetched_value>>> replies;
    std::exception_ptr first_error;
    for (auto& f : done) {
        if (f.failed()) {
            auto ex = f.get_exception();
            if (!first_error) {
                first_error = ex;
            }
            replies.emplace_back();
        } else {
            replies.push_back(f.get());
        }
    }
    if (first_error) {
        std::rethrow_exception(first_error);
    }
    std::vector<std::optional<fetched_value>> out(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
        out[i] = std::move(replies[where[i].first][where[i].second]);
    }
    co_return out;
}

future<store_outcome> client::store(internal::store_op op, std::string_view key, std::string_view value,
                                    uint32_t flags, int64_t exptime, uint64_t cas_unique) {
    return on_server_of(key, [&](internal::client_transport& s) {
        return s.store(op, key, value, flags, exptime, cas_unique);
    });
}

future<store_outcome> client::set(std::string_view key, std::string_view value, uint32_t flags,
                                  int64_t exptime) {
    return store(internal::store_op::set, key, value, flags, exptime, 0);
}

future<store_outcome> client::add(std::string_view key, std::string_view value, uint32_t flags,
                                  int64_t exptime) {
    return store(internal::store_op::add, key, value, flags, exptime, 0);
}

future<store_outcome> client::replace(std::string_view key, std::string_view value, uint32_t flags,
                                      int64_t exptime) {
    return store(internal::store_op::replace, key, value, flags, exptime, 0);
}

future<store_outcome> client::cas(std::string_view key, std::string_view value, uint64_t cas_unique,
                                  uint32_t flags, int64_t exptime) {
    return store(internal::store_op::cas, key, value, flags, exptime, cas_unique);
}

future<store_outcome> client::append(std::string_view key, std::string_view value) {
    return store(internal::store_op::append, key, value, 0, 0, 0);
}

future<store_outcome> client::prepend(std::string_view key, std::string_view value) {
    return store(internal::store_op::prepend, key, value, 0, 0, 0);
}

future<store_outcome> client::store_from(internal::store_op op, std::string_view key,
                                         const net::rdma::buffer& src, size_t offset, size_t length,
                                         uint32_t flags, int64_t exptime, uint64_t cas_unique) {
    return on_server_of(key, [&](internal::client_transport& s) {
        return s.store_from(op, key, registered_span(src, offset, length), flags, exptime, cas_unique);
    });
}

future<store_outcome> client::set_from(std::string_view key, const net::rdma::buffer& src, size_t offset,
                                       size_t length, uint32_t flags, int64_t exptime) {
    return store_from(internal::store_op::set, key, src, offset, length, flags, exptime, 0);
}

future<store_outcome> client::add_from(std::string_view key, const net::rdma::buffer& src, size_t offset,
                                       size_t length, uint32_t flags, int64_t exptime) {
    return store_from(internal::store_op::add, key, src, offset, length, flags, exptime, 0);
}

future<store_outcome> client::replace_from(std::string_view key, const net::rdma::buffer& src, size_t offset,
                                           size_t length, uint32_t flags, int64_t exptime) {
    return store_from(internal::store_op::replace, key, src, offset, length, flags, exptime, 0);
}

future<store_outcome> client::cas_from(std::string_view key, const net::rdma::buffer& src, size_t offset,
                                       size_t length, uint64_t cas_unique, uint32_t flags, int64_t exptime) {
    return store_from(internal::store_op::cas, key, src, offset, length, flags, exptime, cas_unique);
}

future<std::optional<placed_value>> client::get_into(std::string_view key, net::rdma::buffer& dst) {
    return get_into(key, dst, 0, dst ? dst.capacity() : 0);
}

future<std::optional<placed_value>> client::get_into(std::string_view key, net::rdma::buffer& dst,
                                                     size_t offset, size_t capacity) {
    future<std::optional<placed_value>> placed = on_server_of(key, [&](internal::client_transport& s) {
        return s.get_into(key, registered_span(dst, offset, capacity));
    });
    if (offset == 0) {
        return placed;
    }
    return std::move(placed).then([offset](std::optional<placed_value> where) {
        if (where) {
            where->offset += offset;
        }
        return where;
    });
}

future<std::vector<std::optional<placed_value>>> client::get_many_into(std::vector<std::string> keys,
                                                                       net::rdma::buffer& dst, size_t slot) {
    // A coroutine: every exception thrown here fails the returned future. Nothing is sent
    // before every key and the whole range were checked.
    for (const auto& k : keys) {
        check_key(k);
    }
    const size_t capacity = dst ? dst.capacity() : 0;
    if (!keys.empty() && (slot == 0 || slot > capacity / keys.size())) {
        throw client_error(client_errc::bad_request, 0,
                           "get_many_into: " + std::to_string(keys.size()) + " slots of " +
                               std::to_string(slot) + " bytes do not fit a buffer of " +
                               std::to_string(capacity));
    }
    std::vector<future<std::optional<placed_value>>> sent;
    sent.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
        sent.push_back(get_into(keys[i], dst, i * slot, slot));
    }
    auto done = co_await when_all(std::move(sent));
    std::vector<std::optional<placed_value>> out(keys.size());
    std::exception_ptr other_error;
    std::optional<client_error> too_small;
    for (size_t i = 0; i < done.size(); ++i) {
        if (!done[i].failed()) {
            out[i] = done[i].get();
            continue;
        }
        std::exception_ptr ex = done[i].get_exception();
        try {
            std::rethrow_exception(ex);
        } catch (const client_error& e) {
            if (e.needed_capacity() == 0) {
                other_error = other_error ? other_error : ex;
            } else if (!too_small || e.needed_capacity() > too_small->needed_capacity()) {
                too_small = e;
            }
        } catch (...) {
            other_error = other_error ? other_error : ex;
        }
    }
    if (other_error) {
        std::rethrow_exception(other_error);
    }
    if (too_small) {
        throw *too_small;
    }
    co_return out;
}

future<bool> client::remove(std::string_view key) {
    return on_server_of(key, [&](internal::client_transport& s) { return s.remove(key); });
}

future<bool> client::touch(std::string_view key, int64_t exptime) {
    return on_server_of(key, [&](internal::client_transport& s) { return s.touch(key, exptime); });
}

future<std::optional<fetched_value>> client::gat(std::string_view key, int64_t exptime) {
    return on_server_of(key, [&](internal::client_transport& s) { return s.gat(key, exptime); });
}

future<std::optional<uint64_t>> client::incr(std::string_view key, uint64_t delta) {
    return on_server_of(key, [&](internal::client_transport& s) { return s.delta(true, key, delta); });
}

future<std::optional<uint64_t>> client::decr(std::string_view key, uint64_t delta) {
    return on_server_of(key, [&](internal::client_transport& s) { return s.delta(false, key, delta); });
}

future<> client::flush_all(int64_t delay) {
    std::vector<future<>> all;
    for (auto& s : _servers) {
        all.push_back(s->flush_all(delay));
    }
    co_await when_all_succeed(std::move(all));
}

future<std::vector<server_stats>> client::stats() {
    std::vector<future<server_stats>> all;
    for (auto& s : _servers) {
        all.push_back(s->server_statistics());
    }
    return when_all_succeed(std::move(all));
}

future<server_stats> client::stats_of(size_t index) {
    if (index >= _servers.size()) {
        return make_exception_future<server_stats>(
            client_error(client_errc::bad_request, 0,
                         "kv client: no server " + std::to_string(index) + " (" +
                             std::to_string(_servers.size()) + " servers)"));
    }
    return _servers[index]->server_statistics();
}

future<> client::close() {
    std::vector<future<>> all;
    for (auto& s : _servers) {
        all.push_back(s->close());
    }
    co_await when_all_succeed(std::move(all));
}

} // namespace shoal::kv
