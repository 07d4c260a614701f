#pragma once

#include "core/abort_source.hh"
#include "core/future.hh"
#include "core/timer.hh"
#include "net/message.hh"
#include "net/rdma/cm_event.hh"
#include "net/rdma/completion.hh"
#include "net/rdma/connection.hh"
#include "net/rdma/connection_stats.hh"
#include "net/rdma/context.hh"
#include "net/rdma/credit_window.hh"
#include "net/rdma/immediates.hh"
#include "net/rdma/memory_pool.hh"
#include "net/rdma/memory_region.hh"
#include "net/rdma/memory_window.hh"
#include "net/rdma/one_sided_op.hh"
#include "net/rdma/op_completion.hh"
#include "net/rdma/options.hh"
#include "net/rdma/private_data.hh"
#include "net/rdma/send_ring.hh"
#include "net/socket_address.hh"
#include "net/temporary_buffer.hh"

#include <array>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

namespace shoal::net::rdma {

class shard_context;
class connection;

namespace internal {

class connection_impl;
class acceptor;
class shared_receive_queue;
struct window_state;

/// The user's hold on a connection: the connection lives while a ref does (or until it breaks);
/// dropping the last one closes it.
class connection_ref {
public:
    /// Holds `impl`, whose user count the caller has raised (see `connection_impl::make_ref`).
    explicit connection_ref(connection_impl* impl) noexcept
        : _impl(impl) {}
    ~connection_ref();
    connection_ref(const connection_ref&) = delete;
    connection_ref& operator=(const connection_ref&) = delete;
    /// The connection held.
    connection_impl& impl() const noexcept { return *_impl; }

private:
    connection_impl* _impl;
};

/// An RC queue pair on a shard with everything that runs over it: the send ring (selective
/// signaling, batched posting), credit-based flow control over the shard's SRQ, the stream
/// transport's queues, one-sided operations and the WRITE_WITH_IMM event stream. Also the
/// handler of its rdma_cm id's events. Created and used on one shard.
class connection_impl final : public cm_handler {
public:
    /// A connection over rdma_cm id `id` (`active`: the connecting side) on `ctx`'s shard; becomes
    /// the id's event handler and arms the setup timeout. Throws when the shard is stopping or
    /// its CQ cannot grow.
    connection_impl(shard_context& ctx, rdma_cm_id* id, const connection_options& opts, bool active);
    ~connection_impl();
    connection_impl(const connection_impl&) = delete;
    connection_impl& operator=(const connection_impl&) = delete;

    // --- setup (connection_manager.cc)
    /// Active side: resolves, connects; the future yields the connection once established.
    future<std::shared_ptr<connection_ref>> start_connect(const net::socket_address& to);
    /// Active side: an abort of `as` before the connection is established fails the connect
    /// with the abort's reason and tears the connection down.
    void abort_setup_on(abort_source& as);
    /// Passive side: creates the QP for a request carrying `peer` and accepts it; once
    /// established the connection is handed to `a`. Throws (the caller rejects).
    void accept(const conn_params& peer, const cm_event& request, acceptor* a);
    /// Advances setup (resolution, connect, established) or teardown; setup errors fail it.
    void on_cm_event(const cm_event& ev) noexcept override;
    /// The acceptor went away before the connection was established.
    void forget_acceptor() noexcept { _acceptor = nullptr; }

    // --- state
    /// Established and not failed.
    bool usable() const noexcept { return _state == state::established && !_error; }
    /// Its QP and id are freed.
    bool closed() const noexcept { return _state == state::closed; }
    /// Why it closed or broke (null while usable).
    std::exception_ptr error() const noexcept { return _error; }
    /// The region the peer offered, if any.
    const std::optional<remote_region>& peer_region() const noexcept { return _peer.region; }
    /// What the peer announced in its private data.
    const conn_params& peer_params() const noexcept { return _peer; }
    /// This side's address (known once established).
    net::socket_address local_address() const noexcept { return _local_addr; }
    /// The peer's address.
    net::socket_address peer_address() const noexcept { return _peer_addr; }
    /// Counters of this connection.
    const connection_stats& stats() const noexcept { return _stats; }
    /// The shard it lives on.
    unsigned shard() const noexcept { return _shard; }
    /// The QP number; 0 while there is no QP.
    uint32_t qp_num() const noexcept { return _qp ? _qp->qp_num : 0; }
    /// Closes the connection (disconnect, flush, free); pending operations fail with `why`.
    void close(std::exception_ptr why) noexcept;
    /// A user ref was dropped.
    void release_user() noexcept;
    /// A new user hold (raises the user count).
    std::shared_ptr<connection_ref> make_ref();

    // --- data path (data_path.cc)
    /// Posts the queued send requests as one list, adding a credit message first when one is
    /// due. Called by the context once per poll.
    void post_pending() noexcept;
    /// Has `post_pending` run at the end of this poll (once, however often it is asked).
    [[gnu::always_inline]] void need_post() noexcept {
        if (!_dirty && !_resources_gone) {
            _dirty = true;
            _ctx->mark_dirty(this);
        }
    }
    /// A signaled send completed: retires it and the unsignaled requests before it; an error
    /// closes the connection.
    void on_send_complete(send_slot& s, const ibv_wc& wc) noexcept;
    /// A receive of this QP completed; returns with `buf` taken when the data went to a reader.
    void on_receive(const ibv_wc& wc, buffer& buf) noexcept;
    /// Retries getting receive buffers for credits owed to the peer; true when satisfied.
    bool retry_credits() noexcept;
    /// Called by the shard every `give_back_after`: a connection that sent nothing since the
    /// last call and holds more send credits than the peer's idle window hands the excess back
    /// (one `give_back` message), so the peer releases their receives. Returns true while it
    /// still holds an excess (call again later).
    bool give_back_idle_credits() noexcept;
    /// Called by the shard every `give_back_after`: a connection whose peer sent nothing since
    /// the last call while its receive window was open closes the window to `idle_credits`,
    /// withdrawing the credits not yet told to the peer. Returns true while the window is open
    /// and the peer still sends (call again later).
    bool close_idle_window() noexcept;
    /// Both of the above, for the shard's sweep timer; true while either wants another call.
    bool sweep_idle() noexcept;
    /// Frees the QP and the id (at the end of a poll); deletes this when no user holds it. A QP
    /// that was connected is first left in the error state until the device reports its last
    /// shared receive consumed (IBV_EVENT_QP_LAST_WQE_REACHED, or `last_wqe_timeout`), then the
    /// CQ is drained, then the QP destroyed: destroying it earlier lets a NIC drop completions
    /// that still own SRQ buffers.
    void destroy_resources() noexcept;
    /// A device asynchronous event about this connection's QP.
    void on_qp_event(ibv_event_type type) noexcept;

    // --- one-sided (one_sided.cc): the operations of `rdma::connection`, each described by a
    // `one_sided_op`; these templates are defined (and inlined into the callers) there.
    /// Starts `op` (waiting for a free send slot, and a credit for a WRITE_WITH_IMM, behind
    /// earlier operations): resolves when it completed, with the previous value for an atomic
    /// (`T` = uint64_t) or nothing for a transfer (`T` = void).
    template <typename T>
    future<T> start(one_sided_op op);
    /// `start`, cancelled by `as`: see `rdma::connection`.
    template <typename T>
    future<T> start(one_sided_op op, abort_source& as);
    /// `start` of a transfer whose outcome goes to `done` (see `op_completion`): with its turn
    /// now, no promise, future or task.
    void start(one_sided_op op, op_completion& done) noexcept;
    /// See `rdma::connection::next_immediate`; one waiter at a time.
    future<uint32_t> next_immediate();

    // --- memory windows (memory_window.cc)
    /// See `rdma::connection::bind_window`.
    future<remote_region> bind_window(memory_window& w, const ibv_mr* mr, const char* addr, size_t len,
                                      access a);
    /// See `rdma::connection::invalidate_window`.
    future<> invalidate_window(memory_window& w);

    // --- tagged immediates (immediates.cc)
    /// Opens the channel of immediates tagged `tag` (see `rdma::immediate_channel`); the first
    /// one makes every immediate of the connection tagged. Throws on a bad or open tag.
    void open_tag(unsigned tag);
    /// Closes channel `tag`: its unread values are dropped (their credits return).
    void close_tag(unsigned tag) noexcept;
    /// The next value the peer sent on channel `tag`; one waiter per channel.
    future<uint32_t> next_tagged(unsigned tag);
    /// Fails every channel's pending `next` (the connection broke).
    void fail_tag_waiters(std::exception_ptr ex) noexcept;

    // --- stream (stream.cc)
    /// The next received message; empty at end of stream. One read at a time.
    future<net::temporary_buffer> stream_get();
    /// `stream_get` for the message API: the next message, nullopt at end of stream. A read
    /// that waits is resolved by the receive itself (no continuation in between).
    future<std::optional<net::temporary_buffer>> message_get();
    /// `message_get` whose result goes to `r`: from the receive completion when it waits (no
    /// task, no future), at once otherwise (then true).
    bool message_receive_into(net::message_receiver& r);
    /// Forgets a receiver that waits (its message socket is going away).
    void drop_message_receiver() noexcept { _msg_receiver = nullptr; }
    /// Queues bytes to send as credits allow; waits while more than `send_buffer_limit` are
    /// queued.
    future<> stream_put(net::temporary_buffer buf);
    /// Queues several buffers, then sends (so they can share one SEND).
    future<> stream_put_many(std::span<net::temporary_buffer> bufs);
    /// Memory for output_stream to gather into: a pool buffer when the pool can spare one.
    net::temporary_buffer stream_allocate(size_t size);
    /// Resolves at once, unless the connection failed with bytes still queued.
    future<> stream_flush();
    /// Sends end of stream after the queued bytes; resolves when that send completed.
    future<> stream_close_output();
    /// Fails a pending read with `ex` (an abort_source fired); unread messages stay queued.
    void stream_abort_read(const std::exception_ptr& ex) noexcept;
    /// Drops unread messages (returning their credits) and ends the stream for the reader.
    void stream_shutdown_input() noexcept;
    /// Breaks the connection at once (see `stream_socket::abort`).
    void stream_abort() noexcept;
    /// Largest message this side sends: the peer's receive size, capped by the pool's largest
    /// buffer.
    size_t stream_piece_size() const noexcept;

    // --- messages (message.cc): the same SEND/RECV path with one SEND per message
    /// Queues `parts` (1 to `stream_piece_size()` bytes in all, checked by the caller) as one
    /// message; waits like `stream_put`.
    future<> message_put(std::span<net::temporary_buffer> parts, size_t size);

private:
    friend struct send_slot;
    enum class state : uint8_t { resolving, connecting, established, closing, closed };

    // setup helpers (connection_manager.cc)
    void create_qp();
    conn_params local_params() const noexcept;
    /// rdma_cm parameters of our connect or accept: `pdata` as private data, RC retries without
    /// RNR retries (credits make RNR impossible), READ/atomic depths capped by the device, 16 and
    /// the given maxima.
    rdma_conn_param cm_params(const std::array<uint8_t, conn_params_size>& pdata, int max_responder_resources,
                              int max_initiator_depth) const noexcept;
    void fail_setup(const std::string& why) noexcept;
    void graceful_close() noexcept;
    void established(const cm_event& ev) noexcept;
    void on_disconnected() noexcept;

    // send ring (data_path.cc; the slots themselves are `_ring`)
    /// Send slots nobody holds (see `send_ring::free_slots`).
    unsigned free_slots() const noexcept { return _ring.free_slots(); }
    /// Links `s` (filled, from `_ring.next_slot()`) to the batch that `post_pending` posts.
    /// Always inlined: it is on every operation's path.
    [[gnu::always_inline]] void append(send_slot& s) noexcept {
        _ring.link(s);
        need_post();
    }
    /// Finishes a data message of `n` bytes in `s` (immediate with the credits returned, one
    /// send credit used, counters) and appends it to the batch.
    void append_data_message(send_slot& s, size_t n) noexcept;
    void finish_slot(send_slot& s, ibv_wc_status status, const ibv_wc* wc) noexcept;
    /// `finish_slot`, inlined into the completion path.
    void retire_slot(send_slot& s, ibv_wc_status status) noexcept;
    void fail_unposted() noexcept;
    /// The armed fault points of posting (tests): may move the QP to the error state; returns
    /// the error an injected ibv_post_send failure reports (0: none), with `bad` set.
    int inject_post_faults(ibv_send_wr*& bad) noexcept;
    /// Queues a credit-only message when the peer needs credits or control receives back (see
    /// `queue_ctrl`); most polls find none due and return here.
    void maybe_queue_ctrl() noexcept {
        if (_credits.send_ctrl_credits() == 0 || free_slots() == 0) {
            return;
        }
        if (!_credits.ctrl_message_due()) {
            _credits.drop_ctrl_hold();
            return;
        }
        queue_ctrl();
    }
    /// The rest of `maybe_queue_ctrl`, with credits or acks due: holds the credits back one
    /// reactor round for a reply to carry, or queues the credit-only message.
    void queue_ctrl() noexcept;
    /// The control credits owed to the peer, promised again (receives reserved) to ride on a
    /// message now.
    uint32_t take_ctrl_returns() noexcept;
    /// A message used a data credit: its shared receive is consumed (false when the peer had
    /// no credit: a protocol error).
    bool consume_data_credit() noexcept;
    /// Withdraws the credits granted but not told to the peer, down to `idle_credits` or what
    /// the peer holds, releases their receives and closes the window to `idle_credits`.
    void withdraw_untold_credits() noexcept;
    /// A credit-only or give-back message arrived: uses one of the control credits granted to the
    /// peer (false when it had none: a protocol error).
    bool consume_ctrl_credit() noexcept;
    /// After a data message: opens the receive window while the peer runs low on credits (and
    /// grants it), closes it towards `idle_credits` after a window of messages where it did not.
    void adapt_window() noexcept;
    /// The user took `n` received messages or events: their credits are granted again.
    void consumed(unsigned n) noexcept;
    /// Reserves the receives the window lacks (batched, see `credit_window::grant_wanted`).
    void grant_credits() noexcept;
    /// Wakes up to `max` queued one-sided operations whose turn came (in call order).
    void wake_space_waiters(unsigned max = ~0u) noexcept;
    /// Credits or slots came back: hands them to queued one-sided operations and the stream,
    /// fairly (see data_path.cc).
    void serve_senders() noexcept {
        if (!_ring.has_waiters() && tx_empty() && !_fin_requested && _put_waiters.empty()) {
            return; // nobody waits for a slot or credit (one-sided traffic alone)
        }
        serve_waiting_senders();
    }
    /// The work of `serve_senders` when an operation, stream bytes, a FIN or a writer waits.
    void serve_waiting_senders() noexcept;
    /// Whether a one-sided operation must queue behind earlier ones (or for space) rather than
    /// be issued now: operations are issued strictly in the order they were called.
    [[gnu::always_inline]] bool must_wait(bool needs_credit) const noexcept {
        return _ring.has_waiters() || _ring.reserved_slots() > 0 || !can_issue(needs_credit);
    }
    /// Resolves when it is this operation's turn, with a slot (and a credit if it needs one)
    /// reserved for it; the continuation must issue the operation at once.
    future<> wait_turn(bool needs_credit);
    /// Start of every issue_*: a queued operation uses up its reservation.
    void take_turn(bool needs_credit) noexcept;
    /// Gives back the slot (and credit) reserved for a woken waiter.
    void release_turn(bool needs_credit) noexcept;
    void break_with(std::exception_ptr ex) noexcept;
    std::exception_ptr op_error(const send_slot& s, ibv_wc_status status) const;
    std::exception_ptr closed_error() const;

    // one-sided helpers (one_sided.cc)
    /// Whether an operation may take a slot now: one stays free for control messages, and a
    /// WRITE_WITH_IMM also needs a send credit.
    [[gnu::always_inline]] bool can_issue(bool needs_credit) const noexcept {
        return free_slots() > 1 && (!needs_credit || _credits.free_credits() > 0);
    }
    /// Why an operation `what` on `length` bytes at `offset` of `rr` cannot start (null: it
    /// can): a closed connection, bytes outside the remote region, a misaligned atomic.
    std::exception_ptr check(one_sided_op::kind what, uint64_t length, remote_region rr,
                             uint64_t offset) const;
    /// `check` of `op`.
    std::exception_ptr check(const one_sided_op& op) const {
        return check(op.what, op.length(), op.remote, op.offset);
    }
    /// Calls `issue` now, or at the operation's turn (see `wait_turn`).
    template <typename T, typename Issue>
    future<T> start_op(bool needs_credit, Issue issue);
    /// `start_op`, but the returned future fails at once when `as` aborts (see
    /// `rdma::connection`); an operation still queued then is never posted.
    template <typename T, typename Issue>
    future<T> start_abortable(abort_source& as, bool needs_credit, Issue issue);
    /// A slot filled with `op` (signaled, its span's memory held, a WRITE_WITH_IMM's credit
    /// used), not yet appended; an atomic's result word is the slot's in `_atomics`.
    send_slot& prepare(const one_sided_op& op) noexcept;
    /// Posts `op` now (its turn has come and a slot, and credit, is free); `T` as for `start`.
    template <typename T>
    future<T> issue(const one_sided_op& op);
    /// The `op_completion` form of `op` when it must wait for its turn: through the future path.
    void start_behind(one_sided_op op, op_completion& done) noexcept;
    /// Hands `f`'s outcome to `done` when it is ready (an operation that waited for its turn).
    static void complete_when_ready(future<> f, op_completion& done) noexcept;
    /// Where the atomic of slot `s` writes the previous value.
    uint64_t* atomic_result(const send_slot& s) noexcept;
    future<> issue_bind_window(const std::shared_ptr<window_state>& st, const ibv_mr* mr, access a);
    future<> issue_invalidate_window(const std::shared_ptr<window_state>& st);
    /// Start of both: a signaled slot of `kind` (no scatter-gather) holding window `st`.
    send_slot& prepare_window_op(send_slot::op kind, const std::shared_ptr<window_state>& st) noexcept;
    /// End of both: queues `s` and returns its completion.
    future<> post_window_op(send_slot& s) noexcept;

    // stream helpers (stream.cc)
    /// Nothing queued to send (stream bytes or messages).
    bool tx_empty() const noexcept { return _tx.empty() && _msgs.empty(); }
    void transmit() noexcept;
    /// The pool had no memory for queued output: retried on every poll until it has.
    void starve_tx() noexcept;
    /// Posts the first queued message as one SEND; false when the pool is dry (retried).
    bool build_message() noexcept;
    bool build_data_message() noexcept;
    void deliver_rx(net::temporary_buffer buf) noexcept;
    /// True while a stream or message read waits.
    bool rx_waiting() const noexcept { return _rx_waiter || _msg_waiter || _msg_receiver; }
    /// True when a message read made now has to wait for a receive: nothing is queued, the
    /// input goes on, the connection is up and no other read waits.
    bool message_read_waits() const noexcept {
        return _rx.empty() && !_peer_fin && !_input_closed &&
               (_state == state::established || _state == state::connecting) && !rx_waiting();
    }
    /// Hands `buf` (empty: end of stream) to the waiting read, if any.
    void wake_reader(net::temporary_buffer buf) noexcept;
    /// Fails the waiting read, if any.
    void fail_reader(const std::exception_ptr& ex) noexcept;
    /// A WRITE_WITH_IMM's immediate arrived: to `next_immediate`, or to its tag's channel.
    void deliver_immediate(uint32_t imm) noexcept;
    /// Fails the pending read, `next_immediate` and tag channels (after the CQ was drained:
    /// what completed before the failure is delivered first).
    void fail_receive_waiters() noexcept;
    /// Fails writers, flushes, the pending close and queued one-sided operations.
    void fail_send_waiters() noexcept;

    shard_context* _ctx;
    shared_receive_queue* _srq; // of the connection's receive size class, for life
    unsigned _shard;
    rdma_cm_id* _id;
    ibv_qp* _qp = nullptr;
    connection_options _opts;
    bool _active;
    state _state;
    std::exception_ptr _error;
    conn_params _peer;
    net::socket_address _local_addr;
    net::socket_address _peer_addr;
    connection_stats _stats;
    unsigned _user_refs = 0;
    bool _qp_registered = false;
    bool _in_context = false;
    bool _destroy_queued = false;
    bool _resources_gone = false;
    bool _dirty = false;
    bool _starved = false;
    bool _tx_starved = false; // the last transmit found the pool dry
    bool _disconnect_sent = false;
    bool _was_established = false; // its QP may have consumed shared receives
    bool _last_wqe = false;        // IBV_EVENT_QP_LAST_WQE_REACHED seen
    bool _awaiting_last_wqe = false;
    bool _last_wqe_wait_over = false;

    // setup
    std::optional<promise<std::shared_ptr<connection_ref>>> _connect_promise;
    abort_source::subscription _setup_abort; // of the pending connect
    acceptor* _acceptor = nullptr;
    timer<> _setup_timer;
    timer<> _close_timer;
    bool _close_after_fin = false;

    ibv_cq* _cq = nullptr;                // the shard CQ (of several) its sends and receives complete on
    bool _fail_receivers_at_reap = false; // closed inside a dispatch: completions may still follow
    uint32_t _max_inline = 0;
    uint32_t _max_sge = 1; // scatter-gather entries per send (≤ max_send_gather, the device's)
    // the send queue's slots, and the one-sided operations waiting for their turn
    send_ring _ring;
    buffer _atomics; // 8 bytes per slot for atomic results

    // flow control: what we may send, what the peer may send (receives reserved in the SRQ
    // for it), and which of the woken one-sided operations hold a credit
    credit_window _credits;

    // stream receive side
    std::deque<net::temporary_buffer> _rx;
    std::optional<promise<net::temporary_buffer>> _rx_waiter;
    std::optional<promise<std::optional<net::temporary_buffer>>> _msg_waiter; // message_get's
    net::message_receiver* _msg_receiver = nullptr;                           // message_receive_into's
    bool _peer_fin = false;
    bool _input_closed = false;
    bool _stream_taken = false;

    // stream send side
    std::deque<net::temporary_buffer> _tx;
    /// One message of the message API: its parts leave in one SEND.
    struct queued_message {
        std::array<net::temporary_buffer, max_send_gather> parts;
        unsigned count = 0;
        size_t size = 0;
    };
    std::deque<queued_message> _msgs; // used instead of _tx once messages() was taken
    size_t _tx_bytes = 0;
    std::deque<promise<>> _put_waiters;
    bool _fin_requested = false;
    bool _fin_posted = false;
    std::optional<promise<>> _fin_done;
    bool _fin_done_ok = false;
    bool* _eof_flag = nullptr; // the stream source's end-of-stream flag

    // WRITE_WITH_IMM events
    std::deque<uint32_t> _imm;
    std::optional<promise<uint32_t>> _imm_waiter;
    /// Per-tag channels of immediates (allocated when the first channel opens).
    struct tag_channel {
        std::deque<uint32_t> values;
        std::optional<promise<uint32_t>> waiter;
        bool open = false;
    };
    std::unique_ptr<std::array<tag_channel, immediate_tags>> _tags;

    friend class acceptor;
    friend class stream_source;
    friend class ::shoal::net::rdma::connection;
};

} // namespace internal

inline internal::connection_impl& connection::impl() const noexcept {
    return _ref->impl();
}

} // namespace shoal::net::rdma
