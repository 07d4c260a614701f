// The RDMA link: one message per frame, large bodies pulled with one-sided READ.
#include "rpc/rdma_link.hh"

#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "core/log.hh"
#include "core/smp.hh"
#include "net/rdma/context.hh"
#include "net/rdma/memory_pool.hh"
#include "net/rdma/memory_region.hh"

#include <array>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <unordered_map>
#include <vector>

namespace shoal::rpc {

namespace rdma = net::rdma;

namespace {

logger link_log("rpc-rdma");

thread_local rdma_link_stats link_stats;

/// Descriptor of a remote body, after the header in the message: u32 transfer id, u32 region
/// count, then per region u64 address, u32 rkey, u32 length; then the payload when it is not
/// remote.
constexpr size_t descriptor_head = 8;
constexpr size_t region_size = 16;
/// Regions one descriptor may list (the payload and the attachments).
constexpr uint32_t max_regions = 256;

class block_cache;

/// Heap memory registered for local writes, the target of a READ too large for the pool. When
/// freed it goes back to its link's cache (if the link is still there), so a stream of large
/// calls on a connection registers once.
class registered_block final : public net::buffer_owner {
public:
    /// A block of at least `size` bytes: from `cache` when it has one that fits, else new.
    static registered_block* make(size_t size, const std::shared_ptr<block_cache>& cache);
    char* data() const noexcept { return _data; }
    size_t capacity() const noexcept { return _capacity; }
    const rdma::memory_region& region() const noexcept { return _mr; }

private:
    friend class block_cache;
    registered_block(char* data, size_t cap, std::weak_ptr<block_cache> home) noexcept
        : _data(data)
        , _capacity(cap)
        , _shard(this_shard_id())
        , _home(std::move(home)) {}
    ~registered_block() override {
        _mr.deregister();
        std::free(_data);
    }
    void release() noexcept override;

    char* _data;
    size_t _capacity;
    unsigned _shard;
    std::weak_ptr<block_cache> _home;
    rdma::memory_region _mr;
};

/// A link's freed READ targets, kept registered for its next large frames (bounded).
class block_cache {
public:
    static constexpr size_t limit = size_t(16) << 20;
    block_cache() = default;
    block_cache(const block_cache&) = delete;
    block_cache& operator=(const block_cache&) = delete;
    ~block_cache() {
        for (auto* b : _blocks) {
            delete b;
        }
    }
    /// A cached block of capacity `cap`, or null.
    registered_block* take(size_t cap) noexcept {
        for (size_t i = 0; i < _blocks.size(); ++i) {
            if (_blocks[i]->_capacity == cap) {
                registered_block* b = _blocks[i];
                _blocks.erase(_blocks.begin() + i);
                _bytes -= cap;
                return b;
            }
        }
        return nullptr;
    }
    /// Keeps `b`; false when the cache is full.
    bool put(registered_block* b) {
        if (_bytes + b->_capacity > limit) {
            return false;
        }
        _blocks.push_back(b);
        _bytes += b->_capacity;
        return true;
    }

private:
    std::vector<registered_block*> _blocks;
    size_t _bytes = 0;
};

registered_block* registered_block::make(size_t size, const std::shared_ptr<block_cache>& cache) {
    size_t cap = size_t(2) << 20;
    while (cap < size) {
        cap <<= 1;
    }
    if (registered_block* b = cache->take(cap)) {
        b->ref();
        return b;
    }
    void* mem = std::aligned_alloc(4096, cap);
    if (!mem) {
        throw std::bad_alloc();
    }
    auto* b = new registered_block(static_cast<char*>(mem), cap, cache);
    try {
        b->_mr = rdma::register_memory(mem, cap);
    } catch (...) {
        delete b;
        throw;
    }
    ++link_stats.target_registrations;
    return b;
}

void registered_block::release() noexcept {
    // Cached only on its own shard (its registration belongs to that shard's domain).
    if (_shard == this_shard_id()) {
        if (auto home = _home.lock()) {
            try {
                if (home->put(this)) {
                    return;
                }
            } catch (...) {
            }
        }
    }
    delete this;
}

/// What a sender keeps for a body the peer READs: the exports and the memory under them.
struct held_body {
    std::vector<rdma::exported_region> exports;
    std::vector<net::temporary_buffer> memory;
    size_t bytes = 0;
};

/// The state of one link, shared with its loops (the sender, the release reader, READs).
class link_state : public std::enable_shared_from_this<link_state> {
public:
    link_state(rdma::connection c, size_t read_threshold)
        : _conn(std::move(c))
        , _msgs(_conn.messages())
        , _releases(_conn.immediates(release_tag))
        , _max_message(_msgs.max_message_size())
        , _threshold(std::min(read_threshold, _max_message)) {}

    void start() { (void)release_loop(); }

    // --- receiving

    future<std::optional<frame>> read_frame(size_t max_frame) {
        if (_input_shut) {
            return make_ready_future<std::optional<frame>>(std::nullopt);
        }
        _reader.emplace();
        auto result = _reader->get_future();
        (void)_msgs.receive()
            .then([self = shared_from_this(), max_frame](std::optional<net::temporary_buffer> m) {
                if (!m) {
                    return make_ready_future<std::optional<frame>>(std::nullopt);
                }
                return self->on_message(std::move(*m), max_frame);
            })
            .then_wrapped([self = shared_from_this()](future<std::optional<frame>> f) {
                if (!self->_reader) {
                    // Input was shut while this message was on its way: dropped.
                    if (!f.failed()) {
                        f.get();
                    } else {
                        f.ignore_ready_future();
                    }
                    return;
                }
                auto pr = std::move(*self->_reader);
                self->_reader.reset();
                if (f.failed()) {
                    pr.set_exception(f.get_exception());
                } else {
                    pr.set_value(f.get());
                }
            });
        return result;
    }

    void shutdown_input() noexcept {
        _input_shut = true;
        if (_reader) {
            auto pr = std::move(*_reader);
            _reader.reset();
            pr.set_value(std::nullopt);
        }
    }

    // --- sending

    void send(outgoing_frame f) {
        if (_error || _closed) {
            return;
        }
        _queued += f.wire_size();
        _queue.push_back(std::move(f));
        if (!_sending) {
            _sending = true;
            (void)run();
        }
    }

    size_t queued_bytes() const noexcept { return _queued; }

    future<> wait_below(size_t limit) {
        if (_queued < limit || _error) {
            return make_ready_future<>();
        }
        _wait_limit = limit;
        _below.emplace();
        return _below->get_future();
    }

    std::exception_ptr failed() const noexcept { return _error; }

    future<> close() {
        auto keep = shared_from_this();
        _closed = true;
        if (_sending) {
            _idle.emplace();
            co_await _idle->get_future();
        }
        // The peer may still be reading bodies this side exported: wait for its releases (the
        // callers bound this wait; a broken connection frees them at once).
        while (!_held.empty() && !_error) {
            _released.emplace();
            co_await _released->get_future();
        }
        if (!_error) {
            co_await _msgs.close();
        }
    }

    void abort_output(std::exception_ptr why) noexcept {
        if (!_error) {
            _error = why;
        }
        _queue.clear();
        drop_held();
        _queued = 0;
        wake();
    }

    void abort() noexcept {
        _msgs.abort();
        abort_output(std::make_exception_ptr(std::runtime_error("RDMA link aborted")));
    }

    net::socket_address peer_address() const { return _conn.peer_address(); }

private:
    future<std::optional<frame>> on_message(net::temporary_buffer m, size_t max_frame) {
        if (m.size() < frame_header::size) {
            throw protocol_error("RDMA message of " + std::to_string(m.size()) +
                                 " bytes: shorter than a header");
        }
        frame f;
        f.header = frame_header::decode(m.get(), max_frame);
        const frame_header& h = f.header;
        if (h.flags == 0) {
            if (m.size() != frame_header::size + h.body_size()) {
                throw protocol_error("RDMA message of " + std::to_string(m.size()) +
                                     " bytes for a frame of " +
                                     std::to_string(frame_header::size + h.body_size()));
            }
            f.payload = m.share(frame_header::size, h.payload_size);
            f.attachments = m.share(frame_header::size + h.payload_size, h.attachment_size);
            ++link_stats.frames_received;
            return make_ready_future<std::optional<frame>>(std::move(f));
        }
        return fetch_body(std::move(f), std::move(m));
    }

    /// A frame whose body (or part of it) is in the sender's memory: READ it, release it.
    future<std::optional<frame>> fetch_body(frame f, net::temporary_buffer m) {
        auto keep = shared_from_this();
        const frame_header h = f.header;
        const bool remote_payload = (h.flags & frame_header::flag_remote_payload) != 0;
        const size_t remote = (remote_payload ? size_t(h.payload_size) : 0) + h.attachment_size;
        const char* p = m.get() + frame_header::size;
        size_t left = m.size() - frame_header::size;
        if (left < descriptor_head) {
            throw protocol_error("RDMA message too short for its body descriptor");
        }
        uint32_t transfer, count;
        std::memcpy(&transfer, p, 4);
        std::memcpy(&count, p + 4, 4);
        p += descriptor_head;
        left -= descriptor_head;
        if (count == 0 || count > max_regions || left < size_t(count) * region_size) {
            throw protocol_error("RDMA body descriptor with " + std::to_string(count) + " regions");
        }
        std::vector<rdma::remote_region> regions(count);
        size_t sum = 0;
        for (auto& r : regions) {
            uint32_t len;
            std::memcpy(&r.addr, p, 8);
            std::memcpy(&r.rkey, p + 8, 4);
            std::memcpy(&len, p + 12, 4);
            r.length = len;
            sum += len;
            p += region_size;
        }
        left -= size_t(count) * region_size;
        const size_t inline_payload = remote_payload ? 0 : h.payload_size;
        if (sum != remote || remote == 0 || left != inline_payload) {
            throw protocol_error("RDMA body descriptor does not match the frame's sizes");
        }
        // The target: pool memory when it fits, else a registered block.
        rdma::memory_pool& pool = rdma::shard_context::local().pool();
        net::temporary_buffer target;
        std::vector<rdma::local_span> spans;
        spans.reserve(count);
        rdma::buffer b = remote <= pool.max_buffer_size() ? pool.try_allocate(remote) : rdma::buffer();
        if (b) {
            size_t off = 0;
            for (auto& r : regions) {
                spans.push_back(rdma::span_of(b, off, r.length));
                off += r.length;
            }
            target = std::move(b).into_temporary_buffer(remote);
        } else {
            registered_block* blk = registered_block::make(remote, _blocks);
            size_t off = 0;
            for (auto& r : regions) {
                spans.push_back(blk->region().span(off, r.length));
                off += r.length;
            }
            target = net::temporary_buffer(blk->data(), remote, blk);
        }
        std::vector<future<>> reads;
        reads.reserve(count);
        for (size_t i = 0; i < count; ++i) {
            reads.push_back(_conn.read(std::move(spans[i]), regions[i], 0));
        }
        std::exception_ptr failed;
        for (auto& r : co_await when_all(std::move(reads))) {
            if (r.failed()) {
                auto ex = r.get_exception();
                if (!failed) {
                    failed = ex;
                }
            }
        }
        if (failed) {
            std::rethrow_exception(failed); // the target stays alive until every READ ended
        }
        release(transfer);
        link_stats.bytes_read += remote;
        ++link_stats.remote_bodies_received;
        if (remote_payload) {
            f.payload = target.share(0, h.payload_size);
            f.attachments = target.share(h.payload_size, h.attachment_size);
        } else {
            f.payload = m.share(m.size() - inline_payload, inline_payload);
            f.attachments = std::move(target);
        }
        co_return std::move(f);
    }

    /// Tells the peer its body `transfer` was read (a zero-length WRITE_WITH_IMM).
    void release(uint32_t transfer) {
        (void)_releases.write_with_imm({}, rdma::remote_region{0, 0, 0}, 0, transfer)
            .handle_exception([](std::exception_ptr) {}); // a broken connection frees it there
    }

    future<> release_loop() {
        auto keep = shared_from_this();
        try {
            for (;;) {
                uint32_t t = co_await _releases.next();
                auto it = _held.find(t);
                if (it == _held.end()) {
                    link_log.debug("release of unknown body {} from {}", t, _conn.peer_address().to_string());
                    continue;
                }
                _queued -= std::min(it->second.bytes, _queued);
                _held.erase(it);
                --link_stats.exports_held;
                wake();
            }
        } catch (...) {
            // The connection broke (or closed): nobody will READ what is held.
            drop_held();
            if (!_error) {
                _error = std::current_exception();
            }
            wake();
        }
    }

    void drop_held() noexcept {
        for (auto& [t, h] : _held) {
            _queued -= std::min(h.bytes, _queued);
        }
        link_stats.exports_held -= _held.size();
        _held.clear();
    }

    future<> run() {
        auto keep = shared_from_this();
        try {
            while (!_queue.empty() && !_error) {
                outgoing_frame f = std::move(_queue.front());
                _queue.pop_front();
                co_await send_one(std::move(f));
            }
        } catch (...) {
            abort_output(std::current_exception());
        }
        _sending = false;
        wake();
        if (_idle) {
            std::exchange(_idle, std::nullopt)->set_value();
        }
    }

    future<> send_one(outgoing_frame f) {
        const size_t wire = f.wire_size();
        if (wire <= _threshold || f.header.body_size() == 0) {
            f.header.encode(f.head.get_write());
            future<> sent = make_ready_future<>();
            if (f.attachments.size() < rdma::internal::max_send_gather) {
                std::array<net::temporary_buffer, rdma::internal::max_send_gather> parts;
                size_t n = 0;
                parts[n++] = std::move(f.head);
                for (auto& a : f.attachments) {
                    parts[n++] = std::move(a);
                }
                sent = _msgs.send(std::span<net::temporary_buffer>(parts.data(), n));
            } else {
                std::vector<net::temporary_buffer> parts;
                parts.reserve(1 + f.attachments.size());
                parts.push_back(std::move(f.head));
                for (auto& a : f.attachments) {
                    parts.push_back(std::move(a));
                }
                sent = _msgs.send(std::span<net::temporary_buffer>(parts));
            }
            ++link_stats.frames_sent;
            return sent.then([this, wire] {
                _queued -= std::min(wire, _queued);
                wake();
            });
        }
        return send_remote(std::move(f));
    }

    /// Sends the header and a descriptor; the body stays exported until the peer releases it.
    future<> send_remote(outgoing_frame f) {
        held_body h;
        h.bytes = f.wire_size();
        const size_t payload = f.header.payload_size;
        size_t regions = 0;
        for (auto& a : f.attachments) {
            regions += a.empty() ? 0 : 1;
        }
        const size_t inline_size =
            frame_header::size + descriptor_head + (regions + 1) * region_size + payload;
        // Beside remote attachments the payload stays in the message when it fits; alone it is
        // READ like an attachment once over the threshold.
        const bool payload_inline = payload == 0 || inline_size <= (regions > 0 ? _max_message : _threshold);
        if (!payload_inline) {
            ++regions;
            f.header.flags |= frame_header::flag_remote_payload;
        }
        if (f.header.attachment_size > 0) {
            f.header.flags |= frame_header::flag_remote_attachments;
        }
        if (regions == 0 || regions > max_regions) {
            throw protocol_error("a frame with " + std::to_string(regions) +
                                 " body regions cannot be sent by READ");
        }
        net::temporary_buffer desc(frame_header::size + descriptor_head + regions * region_size);
        char* p = desc.get_write();
        f.header.encode(p);
        const uint32_t transfer = _next_transfer;
        _next_transfer = (_next_transfer + 1) & rdma::immediate_channel::max_value;
        std::memcpy(p + frame_header::size, &transfer, 4);
        const uint32_t count = uint32_t(regions);
        std::memcpy(p + frame_header::size + 4, &count, 4);
        p += frame_header::size + descriptor_head;
        auto add_region = [&](const char* data, size_t len) {
            h.exports.push_back(rdma::export_region(const_cast<char*>(data), len, rdma::access::remote_read));
            rdma::remote_region r = h.exports.back().descriptor();
            const uint32_t l = uint32_t(len);
            std::memcpy(p, &r.addr, 8);
            std::memcpy(p + 8, &r.rkey, 4);
            std::memcpy(p + 12, &l, 4);
            p += region_size;
        };
        h.exports.reserve(regions);
        if (!payload_inline) {
            add_region(f.head.get() + frame_header::size, payload);
        }
        for (auto& a : f.attachments) {
            if (!a.empty()) {
                add_region(a.get(), a.size());
            }
        }
        std::array<net::temporary_buffer, 2> parts;
        size_t n = 0;
        parts[n++] = std::move(desc);
        if (payload_inline && payload > 0) {
            parts[n++] = f.head.share(frame_header::size, payload);
        }
        h.memory.push_back(std::move(f.head));
        for (auto& a : f.attachments) {
            h.memory.push_back(std::move(a));
        }
        _held.emplace(transfer, std::move(h));
        ++link_stats.exports_held;
        ++link_stats.remote_bodies_sent;
        return _msgs.send(std::span<net::temporary_buffer>(parts.data(), n));
    }

    void wake() noexcept {
        if (_below && (_queued < _wait_limit || _error)) {
            std::exchange(_below, std::nullopt)->set_value();
        }
        if (_released && (_held.empty() || _error)) {
            std::exchange(_released, std::nullopt)->set_value();
        }
    }

    rdma::connection _conn;
    net::message_connection _msgs;
    rdma::immediate_channel _releases;
    size_t _max_message; // the peer's receive buffer size
    size_t _threshold;
    // receiving
    std::optional<promise<std::optional<frame>>> _reader;
    bool _input_shut = false;
    // sending
    std::deque<outgoing_frame> _queue;
    size_t _queued = 0;
    size_t _wait_limit = 0;
    bool _sending = false;
    bool _closed = false;
    std::exception_ptr _error;
    std::optional<promise<>> _below;
    std::optional<promise<>> _idle;
    std::optional<promise<>> _released;
    std::unordered_map<uint32_t, held_body> _held;
    uint32_t _next_transfer = 0;
    std::shared_ptr<block_cache> _blocks = std::make_shared<block_cache>();
};

class rdma_link_impl final : public link {
public:
    explicit rdma_link_impl(std::shared_ptr<link_state> s) noexcept
        : _s(std::move(s)) {}
    ~rdma_link_impl() override { _s->abort(); }

    future<std::optional<frame>> read_frame(size_t max_frame) override { return _s->read_frame(max_frame); }
    void send(outgoing_frame f) override { _s->send(std::move(f)); }
    size_t queued_bytes() const noexcept override { return _s->queued_bytes(); }
    future<> wait_below(size_t limit) override { return _s->wait_below(limit); }
    std::exception_ptr failed() const noexcept override { return _s->failed(); }
    future<> close() override { return _s->close(); }
    void abort_output(std::exception_ptr why) noexcept override { _s->abort_output(why); }
    void abort() noexcept override { _s->abort(); }
    void shutdown_input() noexcept override { _s->shutdown_input(); }
    void set_nodelay() override {}
    net::socket_address peer_address() const override { return _s->peer_address(); }

private:
    std::shared_ptr<link_state> _s;
};

} // namespace

const rdma_link_stats& rdma_link_stats_here() noexcept {
    return link_stats;
}

std::unique_ptr<link> rdma_link(rdma::connection c, size_t read_threshold) {
    auto s = std::make_shared<link_state>(std::move(c), read_threshold);
    s->start();
    return std::make_unique<rdma_link_impl>(std::move(s));
}

} // namespace shoal::rpc
