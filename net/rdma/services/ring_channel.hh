#pragma once

#include "core/future.hh"
#include "net/rdma/connection.hh"
#include "net/rdma/immediates.hh"
#include "net/rdma/memory_region.hh"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>

namespace shoal::net::rdma {

class ring_consumer;

namespace internal {
class ring_consumer_state;
class ring_producer_state;
/// Test hook: makes a ring that was never attached start at `index` (a multiple of 8) instead
/// of 0, as if that many bytes had passed through it, so a test reaches the wrap of the
/// doorbell's 28-bit field without writing 2 GiB. std::logic_error once attached.
void ring_consumer_start_at(ring_consumer& r, uint64_t index);
} // namespace internal

/// Layout of a ring (see docs/rdma.md, "Ring channel"): a 64-byte header, then the data area.
/// The consumer owns both and keeps the header up to date; the producer only reads the header
/// (RDMA READ) and writes entries into the data area (RDMA WRITE_WITH_IMM).
struct ring_layout {
    /// Bytes before the data area.
    static constexpr size_t header_size = 64;
    /// Offset of the write index (end of the last entry whose doorbell the consumer took).
    static constexpr size_t write_index_offset = 0;
    /// Offset of the read index (end of the last entry the consumer released), *sealed*: the
    /// producer READs it while the consumer moves it, and rxe copies bytes one by one, so a
    /// READ can return a torn word (see `commit_index_offset`).
    static constexpr size_t read_index_offset = 8;
    /// Offset of the data area's capacity.
    static constexpr size_t capacity_offset = 16;
    /// Offset of the magic number (`magic`) that marks a shoal ring.
    static constexpr size_t magic_offset = 24;
    /// Offset of the count of messages up to the write index (since the ring was created).
    /// Not sealed, like the write index: both change only when the consumer takes a batch of
    /// the attached producer, never while a new producer's `open` READs them (see there).
    static constexpr size_t records_offset = 32;
    /// Offset of the commit index of a polling ring: the end of the last batch the producer
    /// wrote, stored by the producer with its own 8-byte WRITE after the batch's data. Sealed:
    /// the low 32 bits are the index in 8-byte units (mod 2^32), the high 32 bits their
    /// complement, so a word read while a WRITE or READ copies it bytewise (rxe does) is
    /// recognised as torn and read again, never taken for an index.
    static constexpr size_t commit_index_offset = 40;
    /// Offset of the consumer's flags (`flag_poll`), read by `open`.
    static constexpr size_t flags_offset = 48;
    /// The consumer polls `commit_index` and asks for a doorbell only before it sleeps.
    static constexpr uint64_t flag_poll = 1;
    /// "SHRING04": a ring of this format (sealed read and commit indices, flags in the header;
    /// doorbells on tagged immediates). Versions 01 to 03 are refused by `open`, and they
    /// refuse this one.
    static constexpr uint64_t magic = 0x3430474e49524853ULL;
    /// Bytes of an entry's header (length + kind); entries are 8-byte aligned.
    static constexpr size_t entry_header_size = 8;
    /// Smallest and largest data area (a power of two in between). The largest is bounded by
    /// the doorbell's 28-bit value (indices in 8-byte units, so 2^31 bytes before it repeats):
    /// decoding a wait request needs twice the capacity below that (ring_channel.cc).
    static constexpr size_t min_capacity = 64;
    static constexpr size_t max_capacity = size_t(1) << 30;
};

/// The two channels of tagged immediates (`connection::immediates`) a ring uses on its
/// connection; both ends must name the same tags, and other users of the connection (messages,
/// the stream, other tags) share it freely. A reverse ring on the same connection takes two
/// other tags.
struct ring_tags {
    /// Producer to consumer: the doorbell of a batch (its end index, in 8-byte units).
    unsigned doorbell = 14;
    /// Wait requests (producer to consumer), their answers and the hello that tells a producer
    /// its connection was attached (consumer to producer).
    unsigned wait = 15;
};

/// Options of a ring consumer.
struct ring_consumer_options {
    /// Poll the ring's commit index from a reactor poller while a `receive` is pending (or a
    /// `ring_fan_in` waits) instead of taking a doorbell per batch; the producer sends a
    /// doorbell only after the consumer asked for one before its shard sleeps (docs/rdma.md,
    /// "Polling consumer").
    bool poll = false;
};

/// Counters of a ring consumer; read them on its shard.
struct ring_consumer_stats {
    uint64_t messages = 0;      ///< messages handed to `receive`
    uint64_t bytes = 0;         ///< their payload bytes
    uint64_t doorbells = 0;     ///< doorbells taken: receive completions (a batch; polling: a wake-up)
    uint64_t polled = 0;        ///< batches found by reading the commit index (no completion)
    uint64_t wake_requests = 0; ///< doorbells asked for before the shard slept (polling ring)
    uint64_t wraps = 0;         ///< wrap markers skipped
    uint64_t wait_requests = 0; ///< times the producer found the ring full and asked to be told
    uint64_t pushes = 0;        ///< read indices pushed back to a waiting producer
};

/// Counters of a ring producer; read them on its shard.
struct ring_producer_stats {
    uint64_t messages = 0;      ///< messages written into the ring
    uint64_t bytes = 0;         ///< their payload bytes
    uint64_t doorbells = 0;     ///< WRITE_WITH_IMMs posted: one per batch, or wake-ups (polling ring)
    uint64_t commits = 0;       ///< batches announced by a commit-index WRITE only (polling ring)
    uint64_t wake_requests = 0; ///< doorbells a polling consumer asked for before it slept
    uint64_t plain_writes = 0;  ///< WRITEs without immediate (the part of a batch before the wrap)
    uint64_t wraps = 0;         ///< wrap markers written
    uint64_t queued = 0;        ///< sends that waited (ring full, or earlier sends waiting)
    uint64_t index_reads = 0;   ///< RDMA READs of the consumer's read index
    uint64_t wait_requests = 0; ///< times the producer asked the consumer to push its read index
};

/// The receiving end of a ring channel: a ring in registered memory of the calling shard, which
/// one `ring_producer` fills with one-sided writes over one connection. The ring is exported at
/// construction (`descriptor()` is what the producer needs); `attach` names the connection the
/// producer's doorbells arrive on. The ring and its indices outlive connections: after a fault,
/// attach a new connection and open a new producer on it (it resumes at the ring's indices).
/// The channel uses two tags of the connection's immediates (`ring_tags`) on both sides; the
/// rest of the connection stays free for other users. Destroying the consumer closes the
/// attached connection and then revokes the ring. Move-only; used on its shard only.
class ring_consumer {
public:
    /// No ring.
    ring_consumer() noexcept;
    /// Allocates and exports a ring with a data area of `capacity` bytes (a power of two from
    /// `ring_layout::min_capacity` to `max_capacity`; std::invalid_argument otherwise). One
    /// registration (rdma_error when it fails); nothing is registered afterwards. A polling
    /// ring (`opts.poll`) registers a poller with the shard's reactor until it is destroyed.
    explicit ring_consumer(size_t capacity, ring_consumer_options opts = {});
    ring_consumer(ring_consumer&&) noexcept;
    ring_consumer& operator=(ring_consumer&&) noexcept;
    ~ring_consumer();

    /// The exported ring (header + data area) to hand to the producer, e.g. as
    /// `listen_options.connection->region` or in a message of the application's own.
    remote_region descriptor() const noexcept;
    /// Takes the doorbells of `c` (a connection on this shard to the producer's side) on the
    /// immediate channels of `tags` (the producer's). Throws std::logic_error while an earlier
    /// attached connection is still usable or when a tag is already open on `c`, and
    /// std::invalid_argument for a bad or repeated tag.
    void attach(connection c, ring_tags tags = {});
    /// The next message, in order: a view of its bytes inside the ring, valid until the next
    /// `receive` or `release` (which give its space back to the producer). The view is the
    /// remote-writable ring itself: an honest producer never writes into space not yet
    /// released, but a faulty or hostile one can change the bytes at any time, also after they
    /// were checked. Parse untrusted content from a copy. Messages whose
    /// doorbell arrived are delivered even after the connection broke; then it fails with the
    /// connection's error. One receive at a time.
    future<std::span<const char>> receive();
    /// Gives the space of the message last received back to the producer now.
    void release() noexcept;
    /// `receive()` without waiting: the next message whose doorbell arrived, or nothing. Not
    /// while a `receive()` is pending (std::logic_error).
    std::optional<std::span<const char>> try_receive();
    /// Why the attached connection failed (null while it works or none is attached).
    std::exception_ptr error() const noexcept;
    /// Calls `fn(ctx)` after every doorbell and failure (null: nobody); for one owner that
    /// serves several rings (`ring_fan_in`). `ctx` must outlive the ring or the next call.
    void notify(void (*fn)(void*) noexcept, void* ctx) noexcept;
    /// Bytes of the data area.
    size_t capacity() const noexcept;
    /// The largest message a producer can send into this ring.
    size_t max_message_size() const noexcept { return capacity() - ring_layout::entry_header_size; }
    /// Counters of this consumer.
    const ring_consumer_stats& stats() const noexcept;
    /// True when it holds a ring.
    explicit operator bool() const noexcept { return bool(_s); }

private:
    friend void internal::ring_consumer_start_at(ring_consumer& r, uint64_t index);
    std::shared_ptr<internal::ring_consumer_state> _s;
};

/// The sending end of a ring channel: writes length-prefixed messages straight into a
/// consumer's ring with RDMA WRITE_WITH_IMM (a tagged immediate is the doorbell), keeping a cached
/// copy of the consumer's read index. A full ring makes `send` wait (nothing is overwritten).
/// Destroying the producer closes its connection; sends still queued fail. Move-only; used on
/// the shard of its connection only.
class ring_producer {
public:
    /// No channel.
    ring_producer() noexcept;
    ring_producer(ring_producer&&) noexcept;
    ring_producer& operator=(ring_producer&&) noexcept;
    ~ring_producer();

    /// Rings larger than this are refused by `open` unless the caller allows more.
    static constexpr size_t default_max_capacity = size_t(64) << 20;
    /// How long `open` waits for the consumer to attach the connection, by default.
    static constexpr std::chrono::milliseconds default_attach_timeout{10000};
    /// Opens a producer on `c` for the ring `ring` (the consumer's `descriptor()`): waits until
    /// the consumer attached `c` (its hello), then reads the ring's header to learn its
    /// capacity, current indices and record count, so a producer on a new connection resumes
    /// where the consumer is (`resume_record`). Registers one local staging area of the
    /// ring's size, so the size the peer announces is bounded: a ring of more than
    /// `max_capacity` data bytes fails with std::invalid_argument naming both sizes, before
    /// anything is allocated. Fails with std::invalid_argument when `ring` is not a shoal ring
    /// or its capacity is not a power of two up to `ring_layout::max_capacity`. Opens the
    /// immediate channels of `tags` on `c` (the consumer's; see `ring_consumer::attach` for
    /// what fails). Fails with std::runtime_error when no hello came within `attach_timeout`
    /// (the consumer did not attach `c`, or it uses other tags).
    static future<ring_producer> open(connection c, const remote_region& ring,
                                      size_t max_capacity = default_max_capacity, ring_tags tags = {},
                                      std::chrono::milliseconds attach_timeout = default_attach_timeout);

    /// Sends `msg` (0 to `max_message_size()` bytes). The bytes are copied into the staging
    /// area when the ring has room, at once; when it is full they are copied later, so keep
    /// them valid until the future resolves. Resolves once the message is in the consumer's
    /// memory. A message larger than the ring fails at once with std::invalid_argument and
    /// changes nothing; a broken connection fails it with the connection's error.
    future<> send(std::span<const char> msg);
    /// Copies `msg` (0 to `max_message_size()` bytes) into the staging area and adds it to this
    /// iteration's batch, like `send` but without a future: true when taken (`msg` may be
    /// reused at once); false, taking nothing, when the ring has no room by the cached read
    /// index or earlier records wait for room — then call `write` or `send`, which wait (a
    /// wrap marker may have been staged; it is harmless). Throws std::invalid_argument for a
    /// message larger than the ring and the connection's error once it broke.
    bool try_write(std::span<const char> msg);
    /// `try_write`, waiting for room: a ready future (no allocation) when the record was
    /// taken at once, else one that resolves when it was copied into the staging area (keep
    /// `msg` valid until then). Records of `write`, `try_write` and `send` keep their call
    /// order. Resolving says nothing about delivery: `flush` does. Fails at once with
    /// std::invalid_argument for a message larger than the ring, with the connection's error
    /// once it broke.
    future<> write(std::span<const char> msg);
    /// Resolves once every record taken before it (by `write`, `try_write` or `send`, also
    /// those still waiting for room) is in the consumer's memory and announced, so the
    /// consumer delivers it even if the connection breaks afterwards. One promise per call,
    /// none per record; a ready future when nothing is outstanding. A broken connection fails
    /// it (and every later call) with the connection's error: then the records since the last
    /// flush that resolved may or may not have arrived (`resume_record` of a new producer says).
    future<> flush();
    /// The largest message the ring takes.
    size_t max_message_size() const noexcept;
    /// Sends waiting for room in the ring.
    size_t queued() const noexcept;
    /// End of what this producer wrote (bytes since the ring was created).
    uint64_t write_index() const noexcept;
    /// Messages the consumer had been announced (since the ring was created) when `open` read
    /// the ring's header: exactly those reached it, so a producer restarted after a crash,
    /// also in a new process, resends from there (the sequence number of its first message
    /// when the application numbers them from 0).
    uint64_t resume_record() const noexcept;
    /// Counters of this producer.
    const ring_producer_stats& stats() const noexcept;
    /// True when it is a channel.
    explicit operator bool() const noexcept { return bool(_s); }

private:
    explicit ring_producer(std::shared_ptr<internal::ring_producer_state> s) noexcept;
    std::shared_ptr<internal::ring_producer_state> _s;
};

} // namespace shoal::net::rdma
