// The RDMA link: small frames in messages (those queued together share one), large bodies
// pulled with one-sided READ.
#include "rpc/rdma_link.hh"

#include "core/coroutine.hh"
#include "core/future_util.hh"
#include "core/log.hh"
#include "core/reactor.hh"
#include "core/smp.hh"
#include "core/task.hh"
#include "net/rdma/memory_pool.hh"
#include "net/rdma/memory_region.hh"
#include "net/rdma/registration_cache.hh"
#include "rpc/internal/rdma_body.hh"

#include <array>
#include <cstdlib>
#include <deque>
#include <unordered_map>
#include <vector>

namespace shoal::rpc {

namespace rdma = net::rdma;

namespace {

logger link_log("rpc-rdma");

thread_local rdma_link_stats link_stats;

/// What a sender keeps for a body the peer READs: the exports and the memory under them.
struct held_body {
    std::vector<rdma::registration_cache::lease> leases; // cached registrations
    std::vector<rdma::exported_region> exports;          // registrations for this body only
    std::vector<net::temporary_buffer> memory;
    size_t bytes = 0;
};

/// The state of one link, shared with its loops (the sender, the release reader, READs).
class link_state : public std::enable_shared_from_this<link_state>, private net::message_receiver {
public:
    link_state(rdma::connection c, const rdma_link_options& o)
        : _conn(std::move(c))
        , _msgs(_conn.messages())
        , _releases(_conn.immediates(release_tag))
        , _max_message(_msgs.max_message_size())
        , _threshold(std::min(o.read_threshold, _max_message))
        , _coalesce(o.coalesce)
        , _cache(std::make_unique<rdma::registration_cache>(o.registration_cache, rdma::access::remote_read))
        , _tx(this)
        , _reads(this, o) {}

    void start() { (void)release_loop(); }

    // --- receiving: messages are taken while a reader waits; a body to READ does not stop
    // the next message from being taken (within the READ budget), so bodies are READ in
    // parallel and frames are handed over in the order they became complete.

    future<std::optional<frame>> read_frame(size_t max_frame) {
        _rx.max_frame = max_frame;
        if (!_rx.ready.empty()) {
            frame f = std::move(_rx.ready.front());
            _rx.ready.pop_front();
            return make_ready_future<std::optional<frame>>(std::move(f));
        }
        if (_rx.error) {
            return make_exception_future<std::optional<frame>>(_rx.error);
        }
        if (_rx.input_shut || (_rx.eof && _reads.bodies == 0)) {
            return make_ready_future<std::optional<frame>>(std::nullopt);
        }
        _rx.reader.emplace();
        auto result = _rx.reader->get_future();
        pump();
        return result;
    }

    /// Every frame to `sink` from now on, handed over where it completes (`deliver`).
    void read_frames_into(frame_sink& sink, size_t max_frame) {
        _rx.max_frame = max_frame;
        _rx.sink = &sink;
        _rx.sink_mode = true;
        if (_rx.error) {
            end_sink(_rx.error);
        } else if (_rx.input_shut || (_rx.eof && _reads.bodies == 0)) {
            end_sink(nullptr);
        } else {
            pump();
        }
    }

    /// The link's owner is going: its sink hears nothing more.
    void drop_sink() noexcept { _rx.sink = nullptr; }

    /// No frame to the sink until `resume_reading`; no message is taken meanwhile.
    void pause_reading() noexcept { _rx.sink_paused = true; }

    /// Hands the sink the frames that completed while it was paused, then reads on.
    void resume_reading() noexcept {
        if (!_rx.sink_paused) {
            return;
        }
        _rx.sink_paused = false;
        while (_rx.sink && !_rx.sink_paused && !_rx.ready.empty()) {
            frame f = std::move(_rx.ready.front());
            _rx.ready.pop_front();
            hand_to_sink(std::move(f));
        }
        if (!_rx.sink_paused) {
            maybe_end();
            pump();
        }
    }

    void shutdown_input() noexcept {
        _rx.input_shut = true;
        _rx.ready.clear();
        if (_rx.reader) {
            std::exchange(_rx.reader, std::nullopt)->set_value(std::nullopt);
        }
        end_sink(nullptr);
    }

    // --- sending

    void send(outgoing_frame&& f) {
        if (_tx.error || _tx.closed) {
            return;
        }
        _tx.queued += f.wire_size();
        if (!_tx.sending && _coalesce && !_rx.more_frames && fits_a_message(f)) {
            // A frame that nothing else is likely to join leaves at once (net/rdma still posts
            // it with whatever else this loop iteration sends: one doorbell): the first of its
            // iteration on this link, with no task queued that could send more and no frame
            // left in the message being delivered (whose replies would follow). Otherwise it
            // waits for the flush task, and the frames sent meanwhile share its message.
            reactor& r = local_reactor();
            const uint64_t loop = r.stats().loops;
            if (loop != _tx.direct_loop && !r.tasks_queued()) {
                _tx.direct_loop = loop;
                send_now(f);
                return;
            }
        }
        _tx.queue.push_back(std::move(f));
        if (!_tx.sending) {
            _tx.sending = true;
            if (_coalesce) {
                // Frames sent before the flush task runs (the rest of this task and the tasks
                // already queued, e.g. the continuations of replies taken in the same poll)
                // join the same message. The fetch task may send them earlier (`post_fetches`);
                // the flush task then finds nothing to do.
                _tx.flush_due = true;
                schedule_once(_tx.flusher);
            } else {
                (void)run(make_ready_future<>());
            }
        }
    }

    size_t queued_bytes() const noexcept { return _tx.queued; }

    future<> wait_below(size_t limit) {
        if (_tx.queued < limit || _tx.error) {
            return make_ready_future<>();
        }
        _tx.wait_limit = limit;
        _tx.below.emplace();
        return _tx.below->get_future();
    }

    std::exception_ptr failed() const noexcept { return _tx.error; }

    future<> close() {
        auto keep = shared_from_this();
        _tx.closed = true;
        if (_tx.sending) {
            _tx.idle.emplace();
            co_await _tx.idle->get_future();
        }
        // The peer may still be reading bodies this side exported: wait for its releases (the
        // callers bound this wait; a broken connection frees them at once).
        while (!_exports.held.empty() && !_tx.error) {
            _exports.released.emplace();
            co_await _exports.released->get_future();
        }
        if (!_tx.error) {
            co_await _msgs.close();
        }
    }

    void abort_output(std::exception_ptr why) noexcept {
        if (!_tx.error) {
            _tx.error = why;
        }
        _tx.queue.clear();
        drop_held();
        _tx.queued = 0;
        wake();
    }

    void abort() noexcept {
        _msgs.abort();
        abort_output(std::make_exception_ptr(std::runtime_error("RDMA link aborted")));
    }

    net::socket_address peer_address() const { return _conn.peer_address(); }

private:
    /// Takes the next message when a reader waits and the READ budget has room. The message is
    /// handed to `on_message` by the transport's receive completion (no task in between); one
    /// that is already there is handed over before `receive_into` returns, and the loop here
    /// takes the next instead of a recursion.
    void pump() {
        if (_rx.pumping) {
            _rx.pump_again = true;
            return;
        }
        _rx.pumping = true;
        do {
            _rx.pump_again = false;
            if (_rx.receiving || (!_rx.reader && (!_rx.sink || _rx.sink_paused)) || _rx.input_shut ||
                _rx.eof || _rx.error) {
                break;
            }
            if (_reads.full()) {
                break; // a READ that ends calls pump() again
            }
            _rx.receiving = true;
            if (!_rx.hold) {
                _rx.hold = shared_from_this(); // the link lives while it waits for a message
            }
            _msgs.receive_into(*this);
        } while (_rx.pump_again);
        _rx.pumping = false;
    }

    /// The message `pump` asked for (nullopt: the peer ended its side). The link's hold stays
    /// when `pump` asked for the next one (the usual case): one hold for a run of messages, not
    /// a shared-pointer count (atomic) taken and dropped per message.
    void on_message(std::optional<net::temporary_buffer> m) noexcept override {
        _rx.receiving = false;
        if (!m) {
            _rx.eof = true;
            maybe_end();
        } else {
            try {
                take_message(std::move(*m));
                pump();
            } catch (...) {
                _rx.more_frames = false;
                fail(std::current_exception());
            }
        }
        if (!_rx.receiving) {
            release_hold(std::move(_rx.hold));
        }
    }

    /// Receiving failed: the reader gets the error after the frames completed before it.
    void on_receive_error(std::exception_ptr ex) noexcept override {
        _rx.receiving = false;
        fail(std::move(ex)); // (no new receive starts after an error: the hold can go)
        release_hold(std::move(_rx.hold));
    }

    /// Drops the hold a finished receive had on the link. When it is the last one, the link
    /// goes in a task of its own: not inside the connection's receive completion that called.
    static void release_hold(std::shared_ptr<link_state> hold) noexcept {
        if (hold && hold.use_count() == 1) {
            (void)yield().then([last = std::move(hold)] {});
        }
    }

    /// A complete frame: to the sink, else to the waiting reader, else queued for the next
    /// read_frame.
    void deliver(frame f) {
        if (_rx.input_shut) {
            return; // input was shut while it was on its way: dropped
        }
        if (_rx.sink_mode) {
            if (_rx.sink_paused) {
                _rx.ready.push_back(std::move(f)); // (in order: nothing is handed over while paused)
            } else {
                hand_to_sink(std::move(f)); // (after the sink's end: dropped)
            }
            return;
        }
        if (_rx.reader) {
            std::exchange(_rx.reader, std::nullopt)->set_value(std::move(f));
        } else {
            _rx.ready.push_back(std::move(f));
        }
    }

    /// Receiving failed (a bad frame, a broken connection): the reader gets the error once the
    /// frames completed before it are taken.
    void fail(std::exception_ptr ex) noexcept {
        if (!_rx.error) {
            _rx.error = ex;
        }
        if (_rx.reader && _rx.ready.empty()) {
            std::exchange(_rx.reader, std::nullopt)->set_exception(_rx.error);
        }
        end_sink(_rx.error);
    }

    /// `f` to the sink; its throw ends reading with that error.
    void hand_to_sink(frame f) noexcept {
        if (!_rx.sink) {
            return;
        }
        try {
            _rx.sink->on_frame(std::move(f));
        } catch (...) {
            fail(std::current_exception());
        }
    }

    /// Tells the sink (if any, once) that reading ended.
    void end_sink(std::exception_ptr why) noexcept {
        if (frame_sink* sink = std::exchange(_rx.sink, nullptr)) {
            sink->on_end(std::move(why));
        }
    }

    /// End of input: reported once no body is being READ.
    void maybe_end() noexcept {
        if (_rx.eof && _reads.bodies == 0 && _rx.reader && _rx.ready.empty()) {
            std::exchange(_rx.reader, std::nullopt)->set_value(std::nullopt);
        }
        if (_rx.eof && _reads.bodies == 0 && !_rx.sink_paused && _rx.ready.empty()) {
            end_sink(nullptr);
        }
    }

    /// A message holds one frame whose body is remote, or one or more whole frames back to back
    /// (sliced out of the receive buffer, no copy).
    void take_message(net::temporary_buffer m) {
        size_t off = 0;
        do {
            if (m.size() - off < frame_header::size) {
                throw protocol_error("RDMA message of " + std::to_string(m.size()) +
                                     " bytes: " + std::to_string(m.size() - off) + " bytes at offset " +
                                     std::to_string(off) + " are shorter than a header");
            }
            frame f;
            f.header = frame_header::decode(m.get() + off, _rx.max_frame);
            const frame_header& h = f.header;
            if (h.flags != 0) {
                if (off != 0) {
                    throw protocol_error("RDMA message with a remote-body frame after another frame");
                }
                start_fetch(std::move(f), std::move(m));
                return;
            }
            const size_t body = off + frame_header::size;
            const size_t end = body + h.body_size(); // body_size() <= _rx.max_frame: no overflow
            if (end > m.size()) {
                throw protocol_error(
                    "RDMA message of " + std::to_string(m.size()) + " bytes for a frame of " +
                    std::to_string(frame_header::size + h.body_size()) + " at offset " + std::to_string(off));
            }
            f.payload = m.share(body, h.payload_size);
            f.attachments = m.share(body + h.payload_size, h.attachment_size);
            ++link_stats.frames_received;
            _rx.more_frames = end < m.size();
            deliver(std::move(f));
            off = end;
        } while (off < m.size());
        _rx.more_frames = false;
        ++link_stats.messages_received;
    }

    /// A body whose READs wait for the fetch task.
    struct pending_fetch {
        frame f;
        net::temporary_buffer m; // the message (holds an inline payload)
        internal::body_descriptor body;
    };

    /// A frame whose body (or part of it) is in the sender's memory: checks its descriptor and
    /// queues the READs of its pieces for the fetch task (`post_fetches`); `finish_fetch`
    /// completes it. The body counts against the READ budget from here on.
    void start_fetch(frame f, net::temporary_buffer m) {
        pending_fetch pf{.f = std::move(f), .m = {}, .body = {}};
        pf.body = internal::parse_body_descriptor(pf.f.header, m.get(), m.size(), _reads.chunk);
        pf.m = std::move(m);
        _reads.count_in(pf.body);
        link_stats.parallel_reads += _reads.bodies > 1 ? 1 : 0;
        _reads.queued.push_back(std::move(pf));
        schedule_once(_reads.fetcher);
    }

    /// The fetch task: posts the READs queued by `start_fetch`, after sending the frames queued
    /// before it. Posting a READ from the completion that delivered the previous body would put
    /// it ahead of the frames the tasks queued behind that completion send (a reply, the
    /// caller's next request): a peer answers the requests of one queue pair in order, and rxe
    /// produces a whole READ response before it looks at a SEND that came after the READ
    /// request, so the peer would see those frames only once the READ ended, and two calls
    /// with large bodies would never overlap (docs/rpc.md, "Ordering of READs and sends").
    void post_fetches() noexcept {
        flush_if_due();
        while (!_reads.queued.empty()) {
            pending_fetch pf = std::move(_reads.queued.front());
            _reads.queued.pop_front();
            net::temporary_buffer target;
            rdma::registration_cache::lease reg;
            std::vector<future<>> reads;
            try {
                const uint64_t regs_before = _cache->stats().registrations;
                target = _cache->allocate(pf.body.bytes);
                reg = _cache->find(target.get(), pf.body.bytes);
                count_registrations(regs_before);
                reads.reserve(pf.body.reads);
            } catch (...) {
                // No memory or no registration for the target: the link fails, as a READ
                // that fails does; nothing queued behind it is fetched.
                _reads.queued.push_front(std::move(pf));
                for (const pending_fetch& left : _reads.queued) {
                    _reads.count_out(left.body.bytes, left.body.reads);
                }
                _reads.queued.clear();
                fail(std::current_exception());
                return;
            }
            size_t off = 0;
            for (auto& r : pf.body.regions) {
                for (uint64_t done = 0; done < r.length;) {
                    const size_t n = std::min<uint64_t>(_reads.chunk, r.length - done);
                    try {
                        reads.push_back(
                            _conn.read(reg.local(target.get() + off + done, n), r.slice(done, n), 0));
                    } catch (...) {
                        reads.push_back(make_exception_future<>(std::current_exception()));
                    }
                    done += n;
                }
                off += r.length;
            }
            (void)finish_fetch(std::move(pf), std::move(target), std::move(reg), std::move(reads));
        }
    }

    /// Waits for the READs of `pf` into `target`, then releases the sender's hold and hands the
    /// frame over.
    future<> finish_fetch(pending_fetch pf, net::temporary_buffer target, rdma::registration_cache::lease reg,
                          std::vector<future<>> reads) {
        auto keep = shared_from_this();
        const size_t n = reads.size();
        const size_t remote = target.size();
        std::exception_ptr failed;
        for (auto& r : co_await when_all(std::move(reads))) {
            if (r.failed()) {
                auto ex = r.get_exception();
                if (!failed) {
                    failed = ex;
                }
            }
        }
        // Every READ ended: the target may be reused from here on.
        reg.reset();
        _reads.count_out(remote, n);
        if (failed) {
            fail(failed);
            co_return;
        }
        release(pf.body.transfer);
        link_stats.bytes_read += remote;
        ++link_stats.remote_bodies_received;
        frame& f = pf.f;
        const frame_header& h = f.header;
        if (pf.body.remote_payload) {
            f.payload = target.share(0, h.payload_size);
            f.attachments = target.share(h.payload_size, h.attachment_size);
        } else {
            f.payload = pf.m.share(pf.m.size() - pf.body.inline_payload, pf.body.inline_payload);
            f.attachments = std::move(target);
        }
        deliver(std::move(f));
        maybe_end();
        pump();
    }

    /// Adds the cache's registrations since `before` (or a hit) to the link counters.
    void count_registrations(uint64_t before) noexcept {
        const uint64_t now = _cache->stats().registrations;
        if (now != before) {
            link_stats.registrations += now - before;
        } else {
            ++link_stats.registration_hits;
        }
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
                auto it = _exports.held.find(t);
                if (it == _exports.held.end()) {
                    link_log.debug("release of unknown body {} from {}", t, _conn.peer_address().to_string());
                    continue;
                }
                const size_t bytes = it->second.bytes;
                _exports.held.erase(it);
                --link_stats.exports_held;
                unqueue(bytes);
            }
        } catch (...) {
            // The connection broke (or closed): nobody will READ what is held.
            drop_held();
            if (!_tx.error) {
                _tx.error = std::current_exception();
            }
            wake();
        }
    }

    void drop_held() noexcept {
        for (auto& [t, h] : _exports.held) {
            _tx.queued -= std::min(h.bytes, _tx.queued);
        }
        link_stats.exports_held -= _exports.held.size();
        _exports.held.clear();
    }

    /// The flush task's sender: the frames that travel in a message leave here while each send
    /// is taken at once (the usual case: one message for all of them), with no coroutine; a
    /// send that has to wait, a failure or a body to READ is left to `run`.
    void flush() noexcept {
        try {
            while (!_tx.queue.empty() && !_tx.error && fits_a_message(_tx.queue.front())) {
                if (!done_or_left_to_run(send_together())) {
                    return;
                }
            }
        } catch (...) {
            abort_output(std::current_exception());
        }
        if (!_tx.queue.empty() && !_tx.error) {
            (void)run(make_ready_future<>());
            return;
        }
        sender_idle();
    }

    /// Sends `f` (which fits a message, with nothing queued before it) as a message of its
    /// own, without the queue and the flush task; a send that has to wait is left to `run`.
    void send_now(outgoing_frame& f) noexcept {
        try {
            done_or_left_to_run(send_in_a_message(f));
        } catch (...) {
            abort_output(std::current_exception());
        }
    }

    /// True when `sent` is done; otherwise the sender (`run`) waits for it, then sends what is
    /// queued behind it.
    bool done_or_left_to_run(future<> sent) {
        if (sent.available() && !sent.failed()) {
            sent.get();
            return true;
        }
        _tx.sending = true;
        (void)run(std::move(sent));
        return false;
    }

    /// Sends the queued frames once `pending` (a send already made) is done.
    future<> run(future<> pending) {
        auto keep = shared_from_this();
        try {
            co_await std::move(pending);
            while (!_tx.queue.empty() && !_tx.error) {
                if (_coalesce && _tx.queue.size() > 1 && fits_a_message(_tx.queue[0]) &&
                    fits_a_message(_tx.queue[1])) {
                    co_await send_together();
                    continue;
                }
                outgoing_frame f = std::move(_tx.queue.front());
                _tx.queue.pop_front();
                co_await send_one(std::move(f));
            }
        } catch (...) {
            abort_output(std::current_exception());
        }
        sender_idle();
    }

    /// The queue is sent (or failed): the next `send` starts the sender again.
    void sender_idle() noexcept {
        _tx.sending = false;
        wake();
        if (_tx.idle) {
            std::exchange(_tx.idle, std::nullopt)->set_value();
        }
    }

    /// True when `f` travels whole in a message (else its body is READ by the peer).
    bool fits_a_message(const outgoing_frame& f) const noexcept {
        return f.wire_size() <= _threshold || f.header.body_size() == 0;
    }

    /// Sends the queued frames that fit a message, from the front of the queue, as one message
    /// of at most the peer's receive buffer size: one SEND whose pieces are the frames' buffers
    /// (gathered, or joined by the transport when there are more than its scatter-gather limit).
    future<> send_together() {
        _tx.parts.clear();
        size_t bytes = 0;
        size_t frames = 0;
        while (!_tx.queue.empty() && fits_a_message(_tx.queue.front()) &&
               bytes + _tx.queue.front().wire_size() <= _max_message) {
            outgoing_frame f = std::move(_tx.queue.front());
            _tx.queue.pop_front();
            bytes += f.wire_size();
            ++frames;
            gather(f);
        }
        return send_gathered(frames, bytes);
    }

    /// Sends `f` alone: whole in a message when it fits one, else by READ (`send_remote`).
    future<> send_one(outgoing_frame f) {
        return fits_a_message(f) ? send_in_a_message(f) : send_remote(std::move(f));
    }

    /// Sends `f` (which fits a message) whole, as a message of its own.
    future<> send_in_a_message(outgoing_frame& f) {
        const size_t wire = f.wire_size();
        _tx.parts.clear();
        gather(f);
        return send_gathered(1, wire);
    }

    /// Encodes `f`'s header and moves its buffers (header first) to the end of `_tx.parts`.
    void gather(outgoing_frame& f) {
        f.header.encode(f.head.get_write());
        _tx.parts.push_back(std::move(f.head));
        for (auto& a : f.attachments) {
            _tx.parts.push_back(std::move(a));
        }
    }

    /// Sends what `gather` collected (`frames` frames, `bytes` bytes) as one message. `_tx.parts`
    /// is a member so that a message costs no allocation once it has grown.
    future<> send_gathered(size_t frames, size_t bytes) {
        future<> sent = _msgs.send(std::span<net::temporary_buffer>(_tx.parts));
        _tx.parts.clear();
        link_stats.frames_sent += frames;
        ++link_stats.messages_sent;
        if (sent.available() && !sent.failed()) {
            unqueue(bytes); // taken at once (the usual case): no continuation
            return sent;
        }
        return sent.then([this, bytes] { unqueue(bytes); });
    }

    /// `bytes` of queued frames left the link: writers waiting for room may go on.
    void unqueue(size_t bytes) noexcept {
        _tx.queued -= std::min(bytes, _tx.queued);
        wake();
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
        const size_t inline_size = internal::body_message_size(regions + 1, payload);
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
        if (regions == 0 || regions > internal::max_body_regions) {
            throw protocol_error("a frame with " + std::to_string(regions) +
                                 " body regions cannot be sent by READ");
        }
        net::temporary_buffer desc(internal::body_message_size(regions, 0));
        f.header.encode(desc.get_write());
        const uint32_t transfer = _exports.next_transfer;
        _exports.next_transfer = (_exports.next_transfer + 1) & rdma::immediate_channel::max_value;
        char* p = internal::encode_body_descriptor_head(desc.get_write() + frame_header::size, transfer,
                                                        uint32_t(regions));
        const uint64_t regs_before = _cache->stats().registrations;
        // Memory the cache has (a block a body was READ into, e.g. echoed back, or an attachment
        // sent before) needs no registration; an attachment is registered and kept in the cache;
        // a payload (a fresh buffer per call) is registered for this body only.
        auto add_region = [&](const net::temporary_buffer& b, bool keep) {
            rdma::remote_region r;
            rdma::registration_cache::lease l = keep ? _cache->hold(b) : _cache->find(b.get(), b.size());
            if (l) {
                r = l.remote(b.get(), b.size());
                h.leases.push_back(std::move(l));
            } else {
                h.exports.push_back(
                    rdma::export_region(const_cast<char*>(b.get()), b.size(), rdma::access::remote_read));
                r = h.exports.back().descriptor();
                ++link_stats.registrations;
            }
            p = internal::encode_body_region(p, r, uint32_t(b.size()));
        };
        h.exports.reserve(regions);
        if (!payload_inline) {
            add_region(f.head.share(frame_header::size, payload), false);
        }
        for (auto& a : f.attachments) {
            if (!a.empty()) {
                add_region(a, true);
            }
        }
        const uint64_t cached_regs = _cache->stats().registrations - regs_before;
        link_stats.registrations += cached_regs;
        link_stats.registration_hits += h.leases.size() - cached_regs;
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
        _exports.held.emplace(transfer, std::move(h));
        ++link_stats.exports_held;
        ++link_stats.remote_bodies_sent;
        return _msgs.send(std::span<net::temporary_buffer>(parts.data(), n));
    }

    /// A task that runs `Run` on the link once the tasks queued before it ran (`schedule_once`);
    /// it holds the state while queued and never allocates.
    template <void (link_state::*Run)()>
    struct link_task final : task {
        explicit link_task(link_state* s) noexcept
            : state(s) {}
        void run_and_dispose() noexcept override {
            std::shared_ptr<link_state> self = std::move(hold);
            (state->*Run)();
        }
        link_state* state;
        std::shared_ptr<link_state> hold; ///< set while the task is queued
    };

    /// Queues `t` unless it is queued already.
    template <void (link_state::*Run)()>
    void schedule_once(link_task<Run>& t) {
        if (!t.hold) {
            t.hold = shared_from_this();
            schedule(&t);
        }
    }

    /// The flush task's work: sends the queued frames unless the fetch task already did.
    void flush_if_due() noexcept {
        if (std::exchange(_tx.flush_due, false)) {
            flush();
        }
    }

    void wake() noexcept {
        if (_tx.below && (_tx.queued < _tx.wait_limit || _tx.error)) {
            std::exchange(_tx.below, std::nullopt)->set_value();
        }
        if (_exports.released && (_exports.held.empty() || _tx.error)) {
            std::exchange(_exports.released, std::nullopt)->set_value();
        }
    }

    /// The receiving side: who takes the frames, and the loop that takes messages for them.
    struct receive_side {
        std::optional<promise<std::optional<frame>>> reader;
        frame_sink* sink = nullptr; // takes every frame (`read_frames_into`) until its end
        bool sink_mode = false;     // frames go to the sink (and are dropped after its end)
        bool sink_paused = false;   // ... but wait in `ready` until `resume_reading`
        bool input_shut = false;
        std::deque<frame> ready;
        size_t max_frame = 0;
        bool receiving = false;           // a receive_into waits for the next message
        bool pumping = false;             // pump() runs (a message handed over at once calls it again)
        bool pump_again = false;          // ... and asked for another round
        bool more_frames = false;         // frames of the message being delivered follow the current one
        std::shared_ptr<link_state> hold; // the link, held while a receive waits
        bool eof = false;
        std::exception_ptr error;
    };

    /// The sending side: frames queued for the sender, and who waits for them to leave.
    struct send_side {
        explicit send_side(link_state* s) noexcept
            : flusher(s) {}
        std::deque<outgoing_frame> queue;
        size_t queued = 0; // bytes of frames queued or exported and not released
        size_t wait_limit = 0;
        bool sending = false;
        bool closed = false;
        std::exception_ptr error;
        std::optional<promise<>> below;
        std::optional<promise<>> idle;
        link_task<&link_state::flush_if_due> flusher; // sends the frames queued together (see `send`)
        bool flush_due = false; // frames wait for the flush task (or the fetch task) to send them
        uint64_t direct_loop = ~uint64_t(0);      // the loop iteration whose first frame left at once
        std::vector<net::temporary_buffer> parts; // the pieces of the message being sent
    };

    /// Bodies this side READs from the peer, and the budget they count against.
    struct body_reads {
        body_reads(link_state* s, const rdma_link_options& o) noexcept
            : chunk(std::max<size_t>(o.read_chunk, 4096))
            , budget(o.read_budget)
            , max_posted(std::max(o.max_reads, 1u))
            , fetcher(s) {}
        /// A body's READs are about to be posted.
        void count_in(const internal::body_descriptor& b) noexcept {
            ++bodies;
            bytes += b.bytes;
            posted += b.reads;
        }
        /// A body's `reads` READs of `n` bytes ended (or will never be posted).
        void count_out(size_t n, size_t reads) noexcept {
            --bodies;
            bytes -= n;
            posted -= reads;
        }
        /// No further message is taken until a READ ends.
        bool full() const noexcept { return bodies > 0 && (posted >= max_posted || bytes >= budget); }

        size_t chunk;        // largest READ request
        size_t budget;       // bytes of bodies in flight before taking messages stops
        unsigned max_posted; // READ requests in flight before taking messages stops
        link_task<&link_state::post_fetches> fetcher; // posts the READs `start_fetch` queued
        std::deque<pending_fetch> queued;
        unsigned bodies = 0; // in flight, queued included
        size_t bytes = 0;
        size_t posted = 0;
    };

    /// Bodies exported to the peer until it releases them.
    struct body_exports {
        std::unordered_map<uint32_t, held_body> held;
        uint32_t next_transfer = 0;
        std::optional<promise<>> released; // `close` waits for the last release
    };

    rdma::connection _conn;
    net::message_connection _msgs;
    rdma::immediate_channel _releases;
    size_t _max_message; // the peer's receive buffer size
    size_t _threshold;
    bool _coalesce;
    std::unique_ptr<rdma::registration_cache> _cache; // outlives the leases of `_exports` and READs
    receive_side _rx;
    send_side _tx;
    body_reads _reads;
    body_exports _exports;
};

class rdma_link_impl final : public link {
public:
    explicit rdma_link_impl(std::shared_ptr<link_state> s) noexcept
        : _s(std::move(s)) {}
    ~rdma_link_impl() override {
        _s->drop_sink();
        _s->abort();
    }

    future<std::optional<frame>> read_frame(size_t max_frame) override { return _s->read_frame(max_frame); }
    void read_frames_into(frame_sink& sink, size_t max_frame) override {
        _s->read_frames_into(sink, max_frame);
    }
    void pause_reading() noexcept override { _s->pause_reading(); }
    void resume_reading() noexcept override { _s->resume_reading(); }
    void send(outgoing_frame&& f) override { _s->send(std::move(f)); }
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

std::unique_ptr<link> rdma_link(rdma::connection c, const rdma_link_options& o) {
    auto s = std::make_shared<link_state>(std::move(c), o);
    s->start();
    return std::make_unique<rdma_link_impl>(std::move(s));
}

} // namespace shoal::rpc
