// The ring channel: messages written with one-sided RDMA into a ring in the receiver's memory.
//
// Wire rules (docs/rdma.md, "Ring channel"):
// - Entries are 8-byte aligned: an 8-byte header {length, kind} then the payload. An entry
//   never splits: when a message does not fit before the end of the data area, a wrap marker
//   claims the rest of the lap and the message starts at offset 0.
// - Every batch of entries ends with one WRITE_WITH_IMM whose immediate, on the doorbell tag
//   (ring_tags), carries the write index after it in 8-byte units, mod 2^28 (`encode`). RC
//   ordering makes the entries visible when the immediate arrives.
// - Attach: the consumer takes a connection only once it no longer processes the previous
//   one's doorbells, and then sends a *hello* (a zero-length WRITE_WITH_IMM on the wait tag
//   carrying its encoded write index); `open` waits for it before it READs the header, so the
//   indices and the record count it resumes at are final.
// - Polling ring (the header's flags say so): a batch is its WRITE(s) and then an 8-byte WRITE
//   of its end into the header's commit index (sealed: `seal`), which the consumer polls; no
//   immediate, except a doorbell the consumer asked for before sleeping (a wake request:
//   zero-length WRITE_WITH_IMM on the doorbell tag, consumer to producer, carrying the encoded
//   commit index it saw; see ring_consumer_state::try_arm). There a doorbell is only a wake-up:
//   its value is not decoded.
// - Back-pressure: the producer keeps a cached read index; when an entry does not fit it READs
//   the consumer's read index, and if the ring is still full it sends a wait request (a
//   zero-length WRITE_WITH_IMM on the wait tag carrying the encoded read index it needs). The
//   consumer answers exactly once, when its read index reaches that point, with a zero-length
//   WRITE_WITH_IMM on the wait tag carrying its encoded read index.
//
// Decoding (why 28 bits are enough): every index is a multiple of 8, so an encoded value
// names its index modulo 2^31 bytes (`index_span`), and each side decodes against an index it
// knows, within a window of index_span bytes:
// - A doorbell w, at the consumer, against the last announced write index W: the producer
//   stages only into room it saw, w <= r_p + cap, where r_p is a read index the consumer
//   published before, so r_p <= R (the consumer's read index now) <= W, and doorbells come in
//   order on their tag, so w > W. Hence 0 < w - W <= cap < index_span: w = W + the forward
//   distance from encode(W) to the value.
// - A wait request for index a, at the consumer, against R: the ring was full by the
//   producer's cached read index r_p (a > r_p) and a <= w_p, the producer's write index, with
//   w_p - r_p <= cap; and r_p <= R <= w_p (R may lag a doorbell still queued on the other tag,
//   never the producer). Hence 8 - cap <= a - R <= cap: 2 cap / 8 values, at most 2^28 when
//   cap <= 2^30 (= ring_layout::max_capacity, static_assert below), so a forward distance d
//   from encode(R) means a = R + d when d <= cap and a = R + d - index_span otherwise.
// - An answer r, at the producer, against its write index w_p: a <= r <= w_p and w_p - a <
//   cap, so r = w_p - the backward distance from encode(w_p) (0 <= w_p - r < index_span).
#include "net/rdma/services/ring_channel.hh"

#include "core/future_util.hh"
#include "core/reactor.hh"
#include "core/smp.hh"
#include "core/task.hh"
#include "net/rdma/error.hh"
#include "net/rdma/shard_check.hh"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace shoal::net::rdma::internal {

namespace {
constexpr uint32_t kind_message = 0x4d474e52; // "RNGM"
constexpr uint32_t kind_wrap = 0x574e4752;    // "RGNW"
constexpr unsigned index_unit_bits = 3;       // indices travel in 8-byte units
/// Bytes after which an encoded index repeats (2^31).
constexpr uint64_t index_span = uint64_t(1) << (immediate_value_bits + index_unit_bits);
static_assert(2 * ring_layout::max_capacity <= index_span, "a wait request could not be decoded");

/// An entry's header, at the start of every entry in the data area (host byte order).
struct entry_header {
    uint32_t length;
    uint32_t kind;
};
static_assert(sizeof(entry_header) == ring_layout::entry_header_size);

/// The value of a tagged immediate that announces ring index `index` (a multiple of 8).
uint32_t encode(uint64_t index) noexcept {
    return uint32_t(index >> index_unit_bits) & immediate_channel::max_value;
}

/// Bytes from `ref` forward to the next index that encodes as `value` (0 to index_span - 8).
uint64_t ahead(uint64_t ref, uint32_t value) noexcept {
    return uint64_t((value - encode(ref)) & immediate_channel::max_value) << index_unit_bits;
}

/// Bytes from `ref` back to the previous index that encodes as `value` (0 to index_span - 8).
uint64_t behind(uint64_t ref, uint32_t value) noexcept {
    return uint64_t((encode(ref) - value) & immediate_channel::max_value) << index_unit_bits;
}

/// The sealed form of `index` (a multiple of 8) in the header's read and commit index words:
/// the index in 8-byte units mod 2^32, and above it their complement (ring_layout).
uint64_t seal(uint64_t index) noexcept {
    const uint32_t units = uint32_t(index >> index_unit_bits);
    return uint64_t(units) | (uint64_t(~units) << 32);
}

/// The index a sealed word names, decoded as the one nearest `near` (they are less than 2^34
/// bytes apart: at most a capacity); nothing when the word is torn (its halves do not match).
std::optional<uint64_t> unseal(uint64_t word, uint64_t near) noexcept {
    const uint32_t units = uint32_t(word);
    if (uint32_t(word >> 32) != ~units) {
        return std::nullopt;
    }
    const int32_t d = int32_t(units - uint32_t(near >> index_unit_bits));
    return near + uint64_t(int64_t(d) * (int64_t(1) << index_unit_bits));
}

void check_tags(ring_tags tags, const char* who) {
    if (tags.doorbell == tags.wait) {
        throw std::invalid_argument(
            fmt::format("{}: the doorbell and wait tags must differ (both are {})", who, tags.wait));
    }
}

/// Bytes an entry with `payload` bytes takes in the ring.
size_t entry_size(size_t payload) noexcept {
    return (ring_layout::entry_header_size + payload + 7) & ~size_t(7);
}

struct free_deleter {
    void operator()(char* p) const noexcept { std::free(p); }
};
using page_memory = std::unique_ptr<char, free_deleter>;

/// Lets a consumer's zero-length WRITE (hello, wake request, push) run unawaited. Its failure
/// breaks the connection, which the doorbell loop reports; the exception itself is consumed here,
/// not dropped (a dropped one is logged as "exceptional future ignored" at every disconnection).
void unawaited(future<> f) noexcept {
    (void)std::move(f).then_wrapped([](future<> w) { w.ignore_ready_future(); });
}

/// Zeroed, page-aligned memory of at least `len` bytes.
page_memory allocate_pages(size_t len) {
    size_t rounded = (len + 4095) & ~size_t(4095);
    char* p = static_cast<char*>(std::aligned_alloc(4096, rounded));
    if (!p) {
        throw std::bad_alloc();
    }
    std::memset(p, 0, rounded);
    return page_memory(p);
}

void check_capacity(size_t capacity, const char* who) {
    if (capacity < ring_layout::min_capacity || capacity > ring_layout::max_capacity ||
        (capacity & (capacity - 1)) != 0) {
        throw std::invalid_argument(fmt::format("{}: ring capacity {} is not a power of two from {} to {}",
                                                who, capacity, ring_layout::min_capacity,
                                                ring_layout::max_capacity));
    }
}

std::exception_ptr protocol_error(const std::string& what) {
    return std::make_exception_ptr(connection_closed("RDMA ring channel: protocol error: " + what));
}
} // namespace

// --- consumer

/// The consumer's ring and state; shared by the handle and the doorbell loop. A polling ring
/// is also a poller of its shard's reactor (registered from construction to `shut`).
class ring_consumer_state final : public poller {
public:
    ring_consumer_state(size_t capacity, ring_consumer_options opts)
        : _shard(this_shard_id())
        , _cap(capacity)
        , _mask(capacity - 1)
        , _polls(opts.poll) {
        check_capacity(capacity, "ring_consumer");
        _mem = allocate_pages(ring_layout::header_size + capacity);
        _data = _mem.get() + ring_layout::header_size;
        store(ring_layout::capacity_offset, capacity);
        store(ring_layout::magic_offset, ring_layout::magic);
        store(ring_layout::flags_offset, _polls ? ring_layout::flag_poll : 0);
        store(ring_layout::read_index_offset, seal(0));
        store(ring_layout::commit_index_offset, seal(0));
        _exported = export_region(_mem.get(), ring_layout::header_size + capacity,
                                  access::remote_read | access::remote_write);
        if (_polls) {
            local_reactor().register_poller(this);
        }
    }
    ring_consumer_state(const ring_consumer_state&) = delete;
    ring_consumer_state& operator=(const ring_consumer_state&) = delete;
    ~ring_consumer_state() override { unregister(); }

    remote_region descriptor() const noexcept { return _exported.descriptor(); }
    size_t capacity() const noexcept { return _cap; }
    const ring_consumer_stats& stats() const noexcept { return _stats; }

    void attach(std::shared_ptr<ring_consumer_state> self, connection c, ring_tags tags) {
        SHOAL_RDMA_CHECK_SHARD(_shard, "ring consumer");
        if (!c) {
            throw std::invalid_argument("ring_consumer::attach: no connection");
        }
        if (_conn && _conn.usable()) {
            throw std::logic_error("ring_consumer::attach: the attached connection is still usable");
        }
        check_tags(tags, "ring_consumer::attach");
        immediate_channel doorbell = c.immediates(tags.doorbell);
        immediate_channel wait = c.immediates(tags.wait);
        ++_gen; // before the old channels close: their loops see they are stale
        if (_polls) {
            // What the old producer committed is delivered; its connection no longer writes
            // (refused while usable), so the commit index is final. The new producer resumes
            // at the write index: a commit index above it must never be read again.
            take_commit();
            commit_word().store(seal(_known_w), std::memory_order_relaxed);
            _wake_asked = false;
        }
        _conn = std::move(c);
        _doorbell = std::move(doorbell);
        _wait = std::move(wait);
        _error = nullptr;
        _push_at.reset();
        (void)doorbells(self, _gen);
        (void)wait_requests(std::move(self), _gen);
        // The hello: the header is final for this connection (see the top of this file). Not
        // awaited: a failure breaks the connection, which the doorbell loop reports.
        unawaited(_wait.write_with_imm({}, remote_region{}, 0, encode(_known_w)));
    }

    void start_at(uint64_t index) {
        if (_conn || _known_w != 0) {
            throw std::logic_error("ring_consumer_start_at: the ring was used already");
        }
        if ((index & 7) != 0) {
            throw std::invalid_argument("ring_consumer_start_at: the index is not a multiple of 8");
        }
        _known_w = _next = _r = index;
        store(ring_layout::write_index_offset, index);
        store(ring_layout::read_index_offset, seal(index));
        store(ring_layout::commit_index_offset, seal(index));
    }

    std::optional<std::span<const char>> try_receive() {
        SHOAL_RDMA_CHECK_SHARD(_shard, "ring consumer");
        if (_waiter) {
            throw std::logic_error("ring_consumer::try_receive() called while a receive() is pending");
        }
        release();
        return next_or_poll();
    }

    std::exception_ptr error() const noexcept { return _error; }

    void notify(void (*fn)(void*) noexcept, void* ctx) noexcept {
        _notify = fn;
        _notify_ctx = ctx;
    }

    future<std::span<const char>> receive() {
        SHOAL_RDMA_CHECK_SHARD(_shard, "ring consumer");
        if (_waiter) {
            return make_exception_future<std::span<const char>>(
                std::logic_error("ring_consumer::receive() called while another is pending"));
        }
        release();
        if (auto m = next_or_poll()) {
            return make_ready_future<std::span<const char>>(*m);
        }
        if (_error) {
            return make_exception_future<std::span<const char>>(_error);
        }
        _waiter.emplace();
        return _waiter->get_future();
    }

    void release() noexcept {
        SHOAL_RDMA_CHECK_SHARD(_shard, "ring consumer");
        if (_next != _r) {
            publish(_next);
        }
    }

    /// The handle went away: close the connection, fail a waiter, revoke the ring.
    void shut() noexcept {
        _shut = true;
        unregister();
        if (_conn) {
            _conn.close();
            _conn = connection();
        }
        fail(std::make_exception_ptr(connection_closed("the RDMA ring consumer was destroyed")));
        _exported.revoke();
    }

    /// Polling ring: while someone waits for a message, reads the commit index and delivers
    /// the batches it announces.
    bool poll() override {
        if (!wanted() || _error || _shut) {
            return false;
        }
        if (!take_commit()) {
            return false;
        }
        wake();
        return true;
    }

    /// Polling ring, before the shard sleeps: asks the producer for a doorbell (a *wake
    /// request*: a zero-length WRITE_WITH_IMM on the doorbell tag, consumer to producer,
    /// carrying the encoded commit index seen), then stays awake once so the request is posted.
    ///
    /// Why no batch is left without a wake-up: the shard sleeps only when `try_arm` returns
    /// true, i.e. a wake request for X (the commit index seen) was sent, no doorbell arrived
    /// since, and the commit index read after it was still X. Every doorbell the producer posts
    /// after taking the request writes the commit index with the batch's end, so the request
    /// is answered exactly once (then `_wake_asked` is cleared by that doorbell), and the
    /// producer answers (1) at once, with a zero-length doorbell, when it has posted beyond X
    /// (its commit WRITEs precede it on the QP, so they are in memory when it arrives), (2)
    /// otherwise with the WRITE_WITH_IMM of its next batch. A batch beyond X is thus followed
    /// by a doorbell whatever the order of the request and the batch, and the doorbell's
    /// completion ends the sleep (the CQ is armed). A doorbell that arrives for another reason
    /// only clears `_wake_asked` early: the consumer then asks again before it sleeps (an extra
    /// doorbell at worst, never a missing one).
    bool try_arm() override {
        if (!wanted() || _error || _shut || !_conn || !_conn.usable()) {
            return true;
        }
        if (take_commit()) {
            wake();
            return false;
        }
        if (_wake_asked) {
            return true;
        }
        _wake_asked = true;
        ++_stats.wake_requests;
        unawaited(_doorbell.write_with_imm({}, remote_region{}, 0, encode(_known_w)));
        return false;
    }

    void disarm() override {}

private:
    /// Takes the doorbells until the connection breaks (then fails the ring: the channel hands
    /// out the doorbells that arrived before) or another connection is attached.
    static future<> doorbells(std::shared_ptr<ring_consumer_state> self, uint64_t gen) {
        for (;;) {
            uint32_t value = 0;
            std::exception_ptr ex;
            try {
                value = co_await self->_doorbell.next();
            } catch (...) {
                ex = std::current_exception();
            }
            if (self->_gen != gen || self->_shut) {
                co_return;
            }
            if (ex) {
                // Batches committed before the break are delivered first (a polling ring).
                if (self->_polls) {
                    self->take_commit();
                }
                self->fail(ex);
                co_return;
            }
            self->on_doorbell(value);
            if (self->_error) {
                co_return;
            }
        }
    }

    /// Takes the wait requests while the connection works (its failure is reported by the
    /// doorbell loop).
    static future<> wait_requests(std::shared_ptr<ring_consumer_state> self, uint64_t gen) {
        for (;;) {
            uint32_t value = 0;
            try {
                value = co_await self->_wait.next();
            } catch (...) {
                co_return;
            }
            if (self->_gen != gen || self->_shut || self->_error) {
                co_return;
            }
            self->on_wait_request(value);
        }
    }

    /// The producer asks to be told when the read index reaches the index `value` encodes
    /// (decoded against the read index: see the top of this file).
    void on_wait_request(uint32_t value) noexcept {
        ++_stats.wait_requests;
        const uint64_t d = ahead(_r, value);
        const uint64_t back = index_span - d;
        const uint64_t at = d <= _cap ? _r + d : (back > _r ? 0 : _r - back);
        if (_r >= at) {
            push();
        } else {
            _push_at = at;
        }
    }

    /// A doorbell: the entries up to the index `value` encodes are in the ring (decoded against
    /// the last doorbell: see the top of this file). On a polling ring only a wake-up: the
    /// commit index, written by the same or an earlier WRITE, says how far.
    void on_doorbell(uint32_t value) {
        if (_polls) {
            ++_stats.doorbells;
            _wake_asked = false;
            take_commit();
            wake();
            return;
        }
        const uint64_t w = _known_w + ahead(_known_w, value);
        if (w == _known_w || w - _r > _cap) {
            broken(fmt::format("doorbell for write index {} after {} (read index {}, capacity {})", w,
                               _known_w, _r, _cap));
            return;
        }
        ++_stats.doorbells;
        announce(w);
        wake();
    }

    /// Polling ring: takes the batches up to the commit index, if it moved (not delivered).
    /// The acquire load orders the reads of their entries after it.
    bool take_commit() {
        // A torn word (the producer's WRITE is being placed) is read again at the next look.
        const std::optional<uint64_t> sealed =
            unseal(commit_word().load(std::memory_order_acquire), _known_w);
        if (!sealed || *sealed <= _known_w) {
            return false;
        }
        const uint64_t c = *sealed;
        if ((c & 7) != 0 || c - _r > _cap) {
            broken(
                fmt::format("commit index {} after {} (read index {}, capacity {})", c, _known_w, _r, _cap));
            return false;
        }
        ++_stats.polled;
        announce(c);
        return true;
    }

    /// The entries up to `w` are in the ring: counts their messages and mirrors the write
    /// index and record count into the header.
    void announce(uint64_t w) {
        _commits[_commits_seen++ % commit_history] = {w, _r};
        for (uint64_t at = _known_w; at < w;) {
            std::optional<entry> e = entry_at(at, w);
            if (!e) {
                break; // next() reports it
            }
            at += e->size;
            _announced += e->message;
        }
        _known_w = w;
        std::atomic_ref<uint64_t>(word(ring_layout::records_offset))
            .store(_announced, std::memory_order_relaxed);
        std::atomic_ref<uint64_t>(word(ring_layout::write_index_offset)).store(w, std::memory_order_release);
    }

    /// Hands the next message to a pending `receive` and tells the owner (`notify`).
    void wake() {
        if (_waiter) {
            if (auto m = next()) {
                auto pr = std::move(*_waiter);
                _waiter.reset();
                pr.set_value(*m);
            }
        }
        if (_notify) {
            _notify(_notify_ctx);
        }
    }

    /// `next()`, after a look at the commit index when nothing is announced (a polling ring).
    std::optional<std::span<const char>> next_or_poll() {
        if (auto m = next()) {
            return m;
        }
        if (_polls && !_error && take_commit()) {
            return next();
        }
        return std::nullopt;
    }

    /// The next message announced and not yet handed out; skips wrap markers (releasing their
    /// space). Called only when nothing is held.
    std::optional<std::span<const char>> next() {
        while (_next < _known_w) {
            const size_t off = _next & _mask;
            std::optional<entry> e = entry_at(_next, _known_w);
            if (!e) {
                broken(bad_entry_report(off));
                return std::nullopt;
            }
            _prev_entry = _next;
            _next += e->size;
            if (!e->message) {
                ++_stats.wraps;
                publish(_next);
                continue;
            }
            ++_stats.messages;
            _stats.bytes += e->length;
            return std::span<const char>(_data + off + sizeof(entry_header), e->length);
        }
        return std::nullopt;
    }

    /// What a protocol error on a bad entry at `off` (of `_next`) says: the entry's header and
    /// first payload words, the same read again after a short spin (a later read that differs
    /// means the bytes were not yet placed when the commit index said so), the indices and the
    /// last commit indices taken, so one failure tells late placement from an overwrite.
    std::string bad_entry_report(size_t off) const {
        uint32_t w[4];
        std::memcpy(w, _data + off, sizeof(w));
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
        while (std::chrono::steady_clock::now() < until) {
        }
        std::atomic_thread_fence(std::memory_order_acquire);
        uint32_t again[4];
        std::memcpy(again, _data + off, sizeof(again));
        std::string history;
        for (size_t i = 0; i < commit_history; ++i) {
            const auto& c = _commits[(_commits_seen + i) % commit_history];
            history += fmt::format(" {}@r{}", c.first, c.second);
        }
        return fmt::format("bad entry (length {}, kind 0x{:x}) at index {} (write index {}); words {:x} {:x} "
                           "{:x} {:x}, 2 ms later {:x} {:x} {:x} {:x}; read index {}, commit word {:#x}, "
                           "previous entry at {}; last indices announced (index@read index):{}",
                           w[0], w[1], _next, _known_w, w[0], w[1], w[2], w[3], again[0], again[1], again[2],
                           again[3], _r,
                           std::atomic_ref<uint64_t>(
                               const_cast<ring_consumer_state*>(this)->word(ring_layout::commit_index_offset))
                               .load(std::memory_order_acquire),
                           _prev_entry, history);
    }

    /// An entry as the consumer checked it: its bytes in the ring, whether it is a message
    /// (else a wrap marker), and the message's length.
    struct entry {
        uint64_t size;
        bool message;
        uint32_t length;
    };

    /// The entry at index `at` of the announced bytes before `end`; nothing when it is not a
    /// valid entry there.
    std::optional<entry> entry_at(uint64_t at, uint64_t end) const noexcept {
        const size_t off = at & _mask;
        entry_header h;
        std::memcpy(&h, _data + off, sizeof(h));
        if (h.kind == kind_wrap && _cap - off <= end - at) {
            return entry{_cap - off, false, 0};
        }
        const size_t size = entry_size(h.length);
        if (h.kind != kind_message || h.length > _cap || size > end - at || size > _cap - off) {
            return std::nullopt;
        }
        return entry{size, true, h.length};
    }

    /// Makes `r` the read index the producer sees; answers a wait request it satisfies. The
    /// release store orders the reads of the released messages before it. The word is sealed:
    /// an RDMA READ of it may be torn (rxe copies bytes one by one while this store lands), and
    /// a torn word must not pass for a larger read index (the producer would overwrite unread
    /// entries); the producer ignores a word whose halves do not match.
    void publish(uint64_t r) noexcept {
        _r = r;
        std::atomic_ref<uint64_t>(word(ring_layout::read_index_offset))
            .store(seal(r), std::memory_order_release);
        if (_push_at && _r >= *_push_at) {
            push();
        }
    }

    void push() noexcept {
        _push_at.reset();
        if (_conn.usable()) {
            ++_stats.pushes;
            // Zero length: the responder checks neither address nor rkey (IB spec C9-88), so the
            // producer needs no region of its own. The result is not awaited: a failure breaks
            // the connection, which the doorbell loop reports.
            unawaited(_wait.write_with_imm({}, remote_region{}, 0, encode(_r)));
        }
    }

    void fail(std::exception_ptr ex) noexcept {
        _error = ex;
        if (_waiter) {
            auto pr = std::move(*_waiter);
            _waiter.reset();
            pr.set_exception(std::move(ex));
        }
        if (_notify) {
            _notify(_notify_ctx);
        }
    }

    void broken(const std::string& what) {
        fail(protocol_error(what));
        if (_conn) {
            _conn.close();
        }
    }

    uint64_t& word(size_t off) noexcept { return *reinterpret_cast<uint64_t*>(_mem.get() + off); }
    std::atomic_ref<uint64_t> commit_word() noexcept {
        return std::atomic_ref<uint64_t>(word(ring_layout::commit_index_offset));
    }
    /// Someone waits for a message: a pending `receive`, or an owner told of every batch.
    bool wanted() const noexcept { return _waiter || _notify; }
    void unregister() noexcept {
        if (_polls && !_unregistered) {
            _unregistered = true;
            local_reactor().unregister_poller(this);
        }
    }
    void store(size_t off, uint64_t v) noexcept { std::memcpy(_mem.get() + off, &v, sizeof(v)); }

    unsigned _shard;
    size_t _cap;
    uint64_t _mask;
    page_memory _mem;          // header + data area
    exported_region _exported; // destroyed before _mem
    char* _data = nullptr;
    connection _conn;
    immediate_channel _doorbell; // of _conn
    immediate_channel _wait;     // of _conn
    uint64_t _gen = 0;
    uint64_t _known_w = 0;   // end of the last entry whose doorbell arrived
    uint64_t _next = 0;      // start of the first entry not handed out
    uint64_t _r = 0;         // end of the last entry released (published in the header)
    uint64_t _announced = 0; // messages up to _known_w (published in the header)
    std::optional<uint64_t> _push_at;
    std::optional<promise<std::span<const char>>> _waiter;
    std::exception_ptr _error;
    bool _shut = false;
    void (*_notify)(void*) noexcept = nullptr; // told of every doorbell and failure (ring_fan_in)
    void* _notify_ctx = nullptr;
    bool _polls;                // polls the commit index (ring_consumer_options::poll)
    bool _wake_asked = false;   // a wake request was sent and no doorbell arrived since
    bool _unregistered = false; // the poller left the reactor
    // Diagnostics of a bad entry (bad_entry_report): the last commit indices taken, with the
    // read index then, and the start of the entry before _next.
    static constexpr size_t commit_history = 8;
    std::pair<uint64_t, uint64_t> _commits[commit_history] = {};
    size_t _commits_seen = 0;
    uint64_t _prev_entry = 0;
    ring_consumer_stats _stats;
};

// --- producer

/// The producer's staging memory and state; shared by the handle, the pump and the flush task.
class ring_producer_state : public std::enable_shared_from_this<ring_producer_state> {
public:
    ring_producer_state(connection c, immediate_channel doorbell, immediate_channel wait,
                        const remote_region& ring, page_memory mem, memory_region mr, size_t cap)
        : _shard(this_shard_id())
        , _conn(std::move(c))
        , _doorbell(std::move(doorbell))
        , _wait(std::move(wait))
        , _ring(ring)
        , _cap(cap)
        , _mask(cap - 1)
        , _mem(std::move(mem))
        , _mr(std::move(mr))
        , _flusher(this) {}

    /// Takes the indices and record count read from the ring's header (validated by the
    /// caller); for a polling consumer, starts taking its wake requests.
    void resume_at(uint64_t w, uint64_t r, uint64_t records, bool consumer_polls) {
        _w = w;
        _posted = w;
        _acked = w;
        _rung = w;
        _r = r;
        _resume_record = records;
        _consumer_polls = consumer_polls;
        if (consumer_polls) {
            (void)wake_requests(shared_from_this());
        }
    }

    uint64_t resume_record() const noexcept { return _resume_record; }

    future<> send(std::span<const char> msg) {
        SHOAL_RDMA_CHECK_SHARD(_shard, "ring producer");
        if (std::exception_ptr ex = refuse(msg, "send")) {
            return make_exception_future<>(std::move(ex));
        }
        if (!_pumping && stage(msg)) {
            _done.push_back(done{_w, promise<>()});
            future<> f = _done.back().pr.get_future();
            schedule_flush();
            return f;
        }
        return enqueue(msg, pending_kind::send);
    }

    bool try_write(std::span<const char> msg) {
        SHOAL_RDMA_CHECK_SHARD(_shard, "ring producer");
        if (std::exception_ptr ex = refuse(msg, "try_write")) {
            std::rethrow_exception(ex);
        }
        return stage_for_batch(msg);
    }

    future<> write(std::span<const char> msg) {
        SHOAL_RDMA_CHECK_SHARD(_shard, "ring producer");
        if (std::exception_ptr ex = refuse(msg, "write")) {
            return make_exception_future<>(std::move(ex));
        }
        if (stage_for_batch(msg)) {
            return make_ready_future<>();
        }
        return enqueue(msg, pending_kind::write);
    }

    future<> flushed() {
        SHOAL_RDMA_CHECK_SHARD(_shard, "ring producer");
        if (_error) {
            return make_exception_future<>(_error);
        }
        if (!_queue.empty()) {
            _queue.push_back(pending{{}, promise<>(), pending_kind::flush});
            return _queue.back().done.get_future();
        }
        if (_acked >= _w) {
            return make_ready_future<>();
        }
        schedule_flush(); // a wrap marker may be staged alone (a try_write that found no room)
        _done.push_back(done{_w, promise<>()});
        return _done.back().pr.get_future();
    }

    /// The handle went away: queued sends fail, the connection closes.
    void shut() noexcept {
        fail(std::make_exception_ptr(connection_closed("the RDMA ring producer was destroyed")));
        _conn.close();
    }

    size_t max_message_size() const noexcept { return _cap - ring_layout::entry_header_size; }
    size_t queued() const noexcept { return _queue.size(); }
    uint64_t write_index() const noexcept { return _w; }
    const ring_producer_stats& stats() const noexcept { return _stats; }
    char* scratch() const noexcept { return _mem.get() + _cap; }
    /// Commit slots after the scratch area: the source of a polling batch's commit WRITE stays
    /// unchanged until that WRITE completed (a slot is reused `commit_slots` batches later).
    static constexpr size_t commit_slots = 64;
    /// Bytes of staging memory a producer registers for a ring of `cap` bytes.
    static size_t staging_size(size_t cap) noexcept {
        return cap + ring_layout::header_size + commit_slots * sizeof(uint64_t);
    }
    uint32_t lkey() const noexcept { return _mr.lkey(); }

private:
    /// What an entry of `_queue` waits for: a send resolves once its record is in the
    /// consumer's memory, a write once it was staged (copied), a flush once everything before
    /// it is in the consumer's memory.
    enum class pending_kind : uint8_t { send, write, flush };
    struct pending {
        std::span<const char> msg;
        promise<> done;
        pending_kind kind;
    };

    /// Why `msg` cannot be taken now (too large for the ring, or the connection failed).
    std::exception_ptr refuse(std::span<const char> msg, const char* op) const {
        if (msg.size() > max_message_size()) {
            return std::make_exception_ptr(std::invalid_argument(fmt::format(
                "ring_producer::{}: a {}-byte message does not fit a ring of {} bytes (at most {} "
                "bytes per message)",
                op, msg.size(), _cap, max_message_size())));
        }
        return _error;
    }

    /// Stages `msg` for this iteration's batch when nothing waits and the ring has room.
    bool stage_for_batch(std::span<const char> msg) noexcept {
        if (_pumping || !stage(msg)) {
            return false;
        }
        schedule_flush();
        return true;
    }

    /// Queues `msg` behind the entries waiting for room and starts the pump.
    future<> enqueue(std::span<const char> msg, pending_kind kind) {
        ++_stats.queued;
        _queue.push_back(pending{msg, promise<>(), kind});
        future<> f = _queue.back().done.get_future();
        if (!_pumping) {
            start_pump();
        }
        return f;
    }

    /// A flush reached the head of the queue: resolved once everything staged so far completed.
    void settle_flush(promise<> pr) {
        if (_acked >= _w) {
            pr.set_value();
        } else {
            _done.push_back(done{_w, std::move(pr)});
        }
    }
    /// A staged or posted send: resolved once the write carrying its entry completed.
    struct done {
        uint64_t end;
        promise<> pr;
    };
    /// Posts the staged entries after the tasks that are already queued (those that run before
    /// it add to the same batch); holds the state while scheduled. Never allocates.
    struct flush_task final : task {
        explicit flush_task(ring_producer_state* s) noexcept
            : state(s) {}
        void run_and_dispose() noexcept override {
            std::shared_ptr<ring_producer_state> self = std::move(hold);
            state->_flush_scheduled = false;
            state->flush();
        }
        ring_producer_state* state;
        std::shared_ptr<ring_producer_state> hold;
    };

    size_t room() const noexcept { return _cap - (_w - _r); }

    /// Copies `msg` into the staging area at the write index (after a wrap marker when it does
    /// not fit before the end of the data area) and advances the write index; nothing is posted.
    /// False when the ring has no room for it by the cached read index (its wrap marker may
    /// have been staged).
    bool stage(std::span<const char> msg) noexcept {
        const size_t size = entry_size(msg.size());
        size_t off = _w & _mask;
        const size_t tail = _cap - off;
        if (size > tail) {
            // The wrap marker is staged as soon as the rest of the lap is free, even when the
            // message must then wait: a message of nearly the ring's size fits only at offset 0.
            if (room() < tail) {
                return false;
            }
            const entry_header h{0, kind_wrap};
            std::memcpy(_mem.get() + off, &h, sizeof(h));
            _w += tail;
            ++_stats.wraps;
            off = 0;
        }
        if (room() < size) {
            return false;
        }
        const entry_header h{uint32_t(msg.size()), kind_message};
        std::memcpy(_mem.get() + off, &h, sizeof(h));
        if (!msg.empty()) {
            std::memcpy(_mem.get() + off + sizeof(h), msg.data(), msg.size());
        }
        _w += size;
        ++_stats.messages;
        _stats.bytes += msg.size();
        return true;
    }

    void schedule_flush() noexcept {
        if (!_flush_scheduled) {
            _flush_scheduled = true;
            _flusher.hold = shared_from_this();
            schedule(&_flusher);
        }
    }

    /// Posts everything staged since the last flush: one WRITE_WITH_IMM for the contiguous
    /// entries, whose immediate (the doorbell) carries the write index after the last one; when
    /// the batch crosses the end of the data area, a plain WRITE of the part before the end
    /// first (RC ordering: it is in the consumer's memory before the doorbell). The connection
    /// issues one-sided operations in call order, so doorbells never overtake one another.
    void flush() noexcept {
        if (_posted == _w || _error) {
            return;
        }
        if (_consumer_polls) {
            flush_committed();
            return;
        }
        const uint64_t from = _posted;
        const uint64_t to = _w;
        _posted = to;
        const size_t off = from & _mask;
        size_t first = std::min<uint64_t>(to - from, _cap - off);
        future<> f = make_ready_future<>();
        if (first < to - from) {
            ++_stats.plain_writes;
            (void)_conn
                .write(local_span{_mem.get() + off, uint32_t(first), _mr.lkey()}, _ring,
                       ring_layout::header_size + off)
                .then_wrapped([](future<> w) { w.ignore_ready_future(); }); // its error breaks the connection
            f = _doorbell.write_with_imm(local_span{_mem.get(), uint32_t(to - from - first), _mr.lkey()},
                                         _ring, ring_layout::header_size, encode(to));
        } else {
            f = _doorbell.write_with_imm(local_span{_mem.get() + off, uint32_t(first), _mr.lkey()}, _ring,
                                         ring_layout::header_size + off, encode(to));
        }
        ++_stats.doorbells;
        (void)completed(shared_from_this(), std::move(f), to);
    }

    /// Polling consumer: WRITEs the batch's entries (two WRITEs when it crosses the end of the
    /// data area), then the batch's end into the header's commit index with a separate 8-byte
    /// WRITE, which the consumer polls: posted after the data on the same QP, it is placed
    /// after it (docs/rdma.md, "Polling consumer"). The commit WRITE carries a doorbell only
    /// when the consumer asked for one (`_wake_asked`). With every commit slot in flight, the
    /// batch waits for the oldest to complete (and grows meanwhile).
    void flush_committed() noexcept {
        if (_commits_in_flight == commit_slots) {
            return; // completed() flushes again
        }
        const uint64_t from = _posted;
        const uint64_t to = _w;
        _posted = to;
        const size_t off = from & _mask;
        const size_t first = std::min<uint64_t>(to - from, _cap - off);
        write_ignored(off, first, off);
        if (first < to - from) {
            ++_stats.plain_writes;
            write_ignored(0, to - from - first, 0);
        }
        char* slot = commit_slot(_commit_seq++ % commit_slots);
        const uint64_t sealed = seal(to);
        std::memcpy(slot, &sealed, sizeof(sealed));
        const local_span src{slot, sizeof(to), _mr.lkey()};
        future<> f = make_ready_future<>();
        if (_wake_asked) {
            _wake_asked = false;
            _rung = to;
            ++_stats.doorbells;
            f = _doorbell.write_with_imm(src, _ring, ring_layout::commit_index_offset, encode(to));
        } else {
            ++_stats.commits;
            f = _conn.write(src, _ring, ring_layout::commit_index_offset);
        }
        ++_commits_in_flight;
        (void)completed(shared_from_this(), std::move(f), to);
    }

    /// A plain WRITE of `len` staged bytes at data offset `off` into the ring at `to`; its
    /// error breaks the connection, which fails the batch's final WRITE.
    void write_ignored(size_t off, size_t len, size_t to) noexcept {
        (void)_conn
            .write(local_span{_mem.get() + off, uint32_t(len), _mr.lkey()}, _ring,
                   ring_layout::header_size + to)
            .then_wrapped([](future<> w) { w.ignore_ready_future(); });
    }

    char* commit_slot(size_t i) const noexcept {
        return _mem.get() + _cap + ring_layout::header_size + i * sizeof(uint64_t);
    }

    /// Takes a polling consumer's wake requests until the connection fails: each carries the
    /// commit index X the consumer saw (decoded against `_posted`: X <= _posted, and _posted -
    /// X <= capacity because the consumer's read index is at most X and this producer never
    /// posts more than a capacity beyond a read index it was told). When a batch beyond X was
    /// posted and no doorbell announced it yet, a zero-length doorbell goes at once (after the
    /// commit WRITEs, in QP order); otherwise the next batch carries one. See
    /// `ring_consumer_state::try_arm` for why no batch is left without a wake-up.
    static future<> wake_requests(std::shared_ptr<ring_producer_state> self) {
        ring_producer_state& s = *self;
        for (;;) {
            uint32_t value = 0;
            try {
                value = co_await s._doorbell.next();
            } catch (...) {
                co_return; // the batches in flight report the failure
            }
            if (s._error) {
                co_return;
            }
            ++s._stats.wake_requests;
            const uint64_t seen = s._posted - behind(s._posted, value);
            if (s._posted > seen) {
                if (s._rung < s._posted) {
                    s._rung = s._posted;
                    ++s._stats.doorbells;
                    (void)s._doorbell.write_with_imm({}, remote_region{}, 0, encode(s._posted))
                        .then_wrapped([](future<> w) { w.ignore_ready_future(); });
                }
                // Else the doorbell of _posted is on its way and answers the request.
            } else {
                s._wake_asked = true;
            }
        }
    }

    /// Resolves the sends of a batch once its write completed (or fails everything).
    static future<> completed(std::shared_ptr<ring_producer_state> self, future<> f, uint64_t end) {
        try {
            co_await std::move(f);
        } catch (...) {
            self->fail(std::current_exception());
            co_return;
        }
        self->_acked = std::max(self->_acked, end);
        while (!self->_done.empty() && self->_done.front().end <= end) {
            self->_done.front().pr.set_value();
            self->_done.pop_front();
        }
        if (self->_consumer_polls) {
            --self->_commits_in_flight;
            self->flush();
        }
    }

    /// Stages queued entries while they fit (a write resolves once staged, a flush waits for
    /// what is staged before it), then posts them as one batch.
    void drain() {
        bool writer_resumed = false;
        while (!_queue.empty() && !_error) {
            pending& p = _queue.front();
            if (p.kind == pending_kind::flush) {
                settle_flush(std::move(p.done));
            } else if (!stage(p.msg)) {
                break;
            } else if (p.kind == pending_kind::send) {
                _done.push_back(done{_w, std::move(p.done)});
            } else {
                p.done.set_value(); // a write: its bytes are staged
                writer_resumed = true;
            }
            _queue.pop_front();
        }
        if (writer_resumed && _queue.empty()) {
            // A writer waited for room and resumes next: its further writes join this batch
            // (the flush task runs after it), so a writer that waits for each record does not
            // post batches of one.
            schedule_flush();
        } else {
            flush(); // before a wait request, every staged entry must be posted
        }
    }

    /// The read index the consumer must reach before the head of the queue can progress (its
    /// wrap marker first, when it needs one).
    uint64_t needed() const noexcept {
        const size_t size = entry_size(_queue.front().msg.size());
        const size_t tail = _cap - (_w & _mask);
        return size > tail ? _w + tail - _cap : _w + size - _cap;
    }

    void update_read_index(uint64_t r) {
        if (r > _w || r + _cap < _w || (r & 7) != 0) {
            std::exception_ptr ex =
                protocol_error(fmt::format("read index {} with write index {} and capacity {}", r, _w, _cap));
            _conn.close();
            std::rethrow_exception(ex);
        }
        _r = std::max(_r, r);
    }

    void start_pump() {
        _pumping = true;
        (void)pump(shared_from_this());
    }

    /// Runs while sends wait for room: refreshes the read index (READ, then a wait request
    /// answered by a push) and issues what fits.
    static future<> pump(std::shared_ptr<ring_producer_state> self) {
        ring_producer_state& s = *self;
        try {
            for (;;) {
                s.drain();
                if (s._queue.empty() || s._error) {
                    break;
                }
                ++s._stats.index_reads;
                co_await s._conn.read(local_span{s.scratch(), 8, s.lkey()}, s._ring,
                                      ring_layout::read_index_offset);
                uint64_t word;
                std::memcpy(&word, s.scratch(), sizeof(word));
                // A torn word (read while the consumer moved it) says nothing: the wait
                // request below learns the read index from an immediate.
                if (std::optional<uint64_t> r = unseal(word, s._w)) {
                    s.update_read_index(*r);
                }
                s.drain();
                if (s._queue.empty() || s._error) {
                    break;
                }
                // Still full: every entry staged so far was posted by drain() before this
                // request (in-order issue), so the consumer reads it against the write index
                // it already knows.
                ++s._stats.wait_requests;
                co_await s._wait.write_with_imm({}, s._ring, 0, encode(s.needed()));
                // The answer, decoded against the write index (see the top of this file); a
                // distance beyond it wraps below zero and is refused as beyond the write index.
                uint32_t value = co_await s._wait.next();
                s.update_read_index(s._w - behind(s._w, value));
            }
        } catch (...) {
            s.fail(std::current_exception());
        }
        s._pumping = false;
    }

    void fail(std::exception_ptr ex) noexcept {
        if (!_error) {
            _error = ex;
        }
        while (!_queue.empty()) {
            _queue.front().done.set_exception(_error);
            _queue.pop_front();
        }
        while (!_done.empty()) {
            _done.front().pr.set_exception(_error);
            _done.pop_front();
        }
    }

    unsigned _shard;
    connection _conn;
    immediate_channel _doorbell; // of _conn
    immediate_channel _wait;     // of _conn
    remote_region _ring;
    size_t _cap;
    uint64_t _mask;
    page_memory _mem;            // staging area (a mirror of the data area) + 64 bytes of scratch
    memory_region _mr;           // destroyed before _mem
    uint64_t _w = 0;             // end of what this producer staged
    uint64_t _posted = 0;        // end of what this producer posted (announced by a doorbell)
    uint64_t _acked = 0;         // end of the last batch whose write completed
    uint64_t _r = 0;             // the consumer's read index, as last seen
    uint64_t _resume_record = 0; // messages announced before this producer (from the header)
    std::deque<pending> _queue;
    std::deque<done> _done;
    flush_task _flusher;
    bool _flush_scheduled = false;
    bool _pumping = false;
    bool _consumer_polls = false; // the consumer polls the commit index (header flags)
    bool _wake_asked = false;     // it asked for a doorbell and none was posted since
    uint64_t _rung = 0;           // _posted when the last doorbell was posted (polling consumer)
    uint64_t _commit_seq = 0;     // commit WRITEs posted (selects their slot)
    size_t _commits_in_flight = 0;
    std::exception_ptr _error;
    ring_producer_stats _stats;
};

void ring_consumer_start_at(ring_consumer& r, uint64_t index) {
    r._s->start_at(index);
}

} // namespace shoal::net::rdma::internal

namespace shoal::net::rdma {

// --- ring_consumer

ring_consumer::ring_consumer() noexcept = default;
ring_consumer::ring_consumer(size_t capacity, ring_consumer_options opts)
    : _s(std::make_shared<internal::ring_consumer_state>(capacity, opts)) {}
ring_consumer::ring_consumer(ring_consumer&&) noexcept = default;
ring_consumer& ring_consumer::operator=(ring_consumer&& o) noexcept {
    if (this != &o) {
        if (_s) {
            _s->shut();
        }
        _s = std::move(o._s);
    }
    return *this;
}
ring_consumer::~ring_consumer() {
    if (_s) {
        _s->shut();
    }
}

remote_region ring_consumer::descriptor() const noexcept {
    return _s->descriptor();
}
void ring_consumer::attach(connection c, ring_tags tags) {
    _s->attach(_s, std::move(c), tags);
}
future<std::span<const char>> ring_consumer::receive() {
    return _s->receive();
}
void ring_consumer::release() noexcept {
    _s->release();
}
std::optional<std::span<const char>> ring_consumer::try_receive() {
    return _s->try_receive();
}
std::exception_ptr ring_consumer::error() const noexcept {
    return _s->error();
}
void ring_consumer::notify(void (*fn)(void*) noexcept, void* ctx) noexcept {
    _s->notify(fn, ctx);
}
size_t ring_consumer::capacity() const noexcept {
    return _s->capacity();
}
const ring_consumer_stats& ring_consumer::stats() const noexcept {
    return _s->stats();
}

// --- ring_producer

ring_producer::ring_producer() noexcept = default;
ring_producer::ring_producer(std::shared_ptr<internal::ring_producer_state> s) noexcept
    : _s(std::move(s)) {}
ring_producer::ring_producer(ring_producer&&) noexcept = default;
ring_producer& ring_producer::operator=(ring_producer&& o) noexcept {
    if (this != &o) {
        if (_s) {
            _s->shut();
        }
        _s = std::move(o._s);
    }
    return *this;
}
ring_producer::~ring_producer() {
    if (_s) {
        _s->shut();
    }
}

future<ring_producer> ring_producer::open(connection c, const remote_region& ring, size_t max_capacity,
                                          ring_tags tags, std::chrono::milliseconds attach_timeout) {
    if (!c) {
        throw std::invalid_argument("ring_producer::open: no connection");
    }
    internal::check_tags(tags, "ring_producer::open");
    if (ring.length <= ring_layout::header_size) {
        throw std::invalid_argument(
            fmt::format("ring_producer::open: a region of {} bytes is not a ring", ring.length));
    }
    const size_t cap = ring.length - ring_layout::header_size;
    if (cap > max_capacity) {
        // The peer decides the size; this side would allocate and register as much.
        throw std::invalid_argument(fmt::format(
            "ring_producer::open: the peer's ring of {} bytes exceeds this side's limit of {} bytes "
            "(max_capacity)",
            cap, max_capacity));
    }
    internal::check_capacity(cap, "ring_producer::open");
    immediate_channel doorbell = c.immediates(tags.doorbell);
    immediate_channel wait = c.immediates(tags.wait);
    const size_t staging = internal::ring_producer_state::staging_size(cap);
    internal::page_memory mem = internal::allocate_pages(staging);
    memory_region mr = register_memory(mem.get(), staging);
    char* header = mem.get() + cap;
    // The consumer's hello says it attached this connection: the header is final (see the top of
    // ring_channel.cc). A value other than its write index is a protocol error.
    uint32_t hello = 0;
    try {
        hello = co_await with_timeout(steady_clock_type::now() + attach_timeout, wait.next());
    } catch (const timed_out_error&) {
        throw std::runtime_error(fmt::format(
            "ring_producer::open: no hello from the consumer within {} ms: it has not attached this "
            "connection, or it uses other ring tags (this side: doorbell {}, wait {})",
            attach_timeout.count(), tags.doorbell, tags.wait));
    }
    co_await c.read(mr.span(cap, ring_layout::header_size), ring, 0);
    uint64_t w, r, capacity, magic, records, flags;
    std::memcpy(&w, header + ring_layout::write_index_offset, 8);
    std::memcpy(&r, header + ring_layout::read_index_offset, 8);
    // The read index may be moving (the consumer still releases messages): a torn word gives
    // the lowest index it can be, a capacity behind the write index (the first send READs it).
    r = internal::unseal(r, w).value_or(w >= cap ? w - cap : 0);
    std::memcpy(&capacity, header + ring_layout::capacity_offset, 8);
    std::memcpy(&magic, header + ring_layout::magic_offset, 8);
    // `records` and `w` are plain words, and this READ cannot tear them (rxe copies bytewise):
    // the consumer writes both only in `announce`, for a doorbell or a commit index of the
    // attached connection, and it sent the hello after its last announce before this one.
    // Until this READ completed nothing can announce: the doorbells and commit WRITEs of this
    // connection come from this producer after `open`, its stale channel loops ignore an older
    // connection's (`_gen`), and that connection no longer writes (`attach` refuses a usable
    // one; polling: `attach` took its last commit index and reset the word). Only `read_index`
    // moves meanwhile (`release`), hence sealed. `encode(w) == hello` below also checks `w`.
    std::memcpy(&records, header + ring_layout::records_offset, 8);
    std::memcpy(&flags, header + ring_layout::flags_offset, 8);
    if (magic != ring_layout::magic || capacity != cap || r > w || w - r > cap || ((w | r) & 7) != 0 ||
        internal::encode(w) != hello) {
        throw std::invalid_argument(
            fmt::format("ring_producer::open: the region is not a shoal ring of {} bytes "
                        "(magic 0x{:x}, capacity {}, write index {}, read index {}, hello {})",
                        cap, magic, capacity, w, r, hello));
    }
    auto s = std::make_shared<internal::ring_producer_state>(
        std::move(c), std::move(doorbell), std::move(wait), ring, std::move(mem), std::move(mr), cap);
    s->resume_at(w, r, records, (flags & ring_layout::flag_poll) != 0);
    co_return ring_producer(std::move(s));
}

future<> ring_producer::send(std::span<const char> msg) {
    return _s->send(msg);
}
bool ring_producer::try_write(std::span<const char> msg) {
    return _s->try_write(msg);
}
future<> ring_producer::write(std::span<const char> msg) {
    return _s->write(msg);
}
future<> ring_producer::flush() {
    return _s->flushed();
}
size_t ring_producer::max_message_size() const noexcept {
    return _s->max_message_size();
}
size_t ring_producer::queued() const noexcept {
    return _s->queued();
}
uint64_t ring_producer::write_index() const noexcept {
    return _s->write_index();
}
uint64_t ring_producer::resume_record() const noexcept {
    return _s->resume_record();
}
const ring_producer_stats& ring_producer::stats() const noexcept {
    return _s->stats();
}

} // namespace shoal::net::rdma
