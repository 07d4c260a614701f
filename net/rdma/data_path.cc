// The data path of a connection: the send ring with selective signaling and batched posting,
// send completions, receives from the shard's SRQ, and credit-based flow control.
#include "net/rdma/connection_impl.hh"

#include "core/log.hh"
#include "net/rdma/context.hh"
#include "net/rdma/error.hh"
#include "net/rdma/fault_injector.hh"

#include <algorithm>
#include <cstring>

#include <arpa/inet.h>
#include <fmt/format.h>

namespace shoal::net::rdma::internal {

namespace {
logger qp_log("rdma");

const char* op_name(send_slot::op k) noexcept {
    switch (k) {
    case send_slot::op::stream:
        return "SEND";
    case send_slot::op::ctrl:
        return "SEND (credits)";
    case send_slot::op::fin:
        return "SEND (end of stream)";
    case send_slot::op::read:
        return "READ";
    case send_slot::op::write:
        return "WRITE";
    case send_slot::op::write_imm:
        return "WRITE_WITH_IMM";
    case send_slot::op::fetch_add:
        return "FETCH_AND_ADD";
    case send_slot::op::compare_swap:
        return "COMPARE_AND_SWAP";
    case send_slot::op::bind_window:
        return "BIND_MW";
    case send_slot::op::invalidate_window:
        return "LOCAL_INV";
    default:
        return "?";
    }
}
} // namespace

std::exception_ptr connection_impl::closed_error() const {
    return std::make_exception_ptr(
        connection_closed("RDMA connection to " + _peer_addr.to_string() + " is closed"));
}

std::exception_ptr connection_impl::op_error(const send_slot& s, ibv_wc_status status) const {
    if (status == IBV_WC_WR_FLUSH_ERR) {
        return _error ? _error : closed_error();
    }
    std::string what;
    bool one_sided = s.kind >= send_slot::op::read && s.kind <= send_slot::op::compare_swap;
    if (one_sided) {
        what = fmt::format("RDMA {} of {} bytes at remote 0x{:x} (rkey 0x{:x}) on the connection to {}: {}",
                           op_name(s.kind), s.sge.length,
                           s.kind >= send_slot::op::fetch_add ? s.wr.wr.atomic.remote_addr
                                                              : s.wr.wr.rdma.remote_addr,
                           s.kind >= send_slot::op::fetch_add ? s.wr.wr.atomic.rkey : s.wr.wr.rdma.rkey,
                           _peer_addr.to_string(), ibv_wc_status_str(status));
    } else {
        what = fmt::format("RDMA {} on the connection to {}: {}", op_name(s.kind), _peer_addr.to_string(),
                           ibv_wc_status_str(status));
    }
    if (status == IBV_WC_REM_ACCESS_ERR) {
        return std::make_exception_ptr(remote_access_error(what));
    }
    return std::make_exception_ptr(connection_closed(what));
}

void connection_impl::post_pending() noexcept {
    _dirty = true; // appends made while posting are posted here, not queued again
    if (_state == state::closing) {
        fail_unposted();
        _dirty = false;
        return;
    }
    if (_state != state::established) {
        _dirty = false;
        return;
    }
    maybe_queue_ctrl();
    if (_ring.unposted() == 0) {
        _dirty = false;
        return;
    }
    // The last request of the batch is signaled when it holds memory, so that memory comes back
    // soon; otherwise unsignaled requests are retired by the next signaled one.
    send_slot& last = _ring.at(_ring.head() - 1);
    bool holds = !(last.wr.send_flags & IBV_SEND_INLINE) && (last.copy || last.held);
    if (!last.signaled && holds) {
        _ring.signal(last);
    }
    unsigned n = _ring.unposted();
    ibv_send_wr* bad = nullptr;
    int rc = 0;
    if (faults().armed()) [[unlikely]] {
        rc = inject_post_faults(bad);
    }
    if (rc == 0) {
        rc = ibv_post_send(_qp, &_ring.at(_ring.posted()).wr, &bad);
    }
    _ctx->count_post(n);
    uint64_t end = _ring.head();
    if (rc != 0) {
        end = _ring.posted();
        while (end < _ring.head() && &_ring.at(end).wr != bad) {
            ++end;
        }
    }
    for (uint64_t seq = _ring.posted(); seq < end; ++seq) {
        send_slot& s = _ring.at(seq);
        if (s.wr.send_flags & IBV_SEND_INLINE) {
            s.held.reset(); // inline data was copied into the request
            s.copy.reset();
        }
        ++(s.signaled ? _stats.signaled : _stats.unsignaled);
    }
    _ring.set_posted(end);
    _dirty = false;
    if (rc != 0) {
        close(std::make_exception_ptr(connection_closed(
            errno_text("ibv_post_send on the connection to " + _peer_addr.to_string(), rc))));
    }
}

int connection_impl::inject_post_faults(ibv_send_wr*& bad) noexcept {
    if (faults().hit(fault::qp_error)) {
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_ERR;
        ibv_modify_qp(_qp, &attr, IBV_QP_STATE); // the batch is posted and flushed with errors
    }
    if (faults().hit(fault::post_send_fails)) {
        bad = &_ring.at(_ring.posted()).wr; // nothing of the batch was posted
        return EIO;
    }
    return 0;
}

void connection_impl::fail_unposted() noexcept {
    while (send_slot* s = _ring.unlink_newest()) {
        finish_slot(*s, IBV_WC_WR_FLUSH_ERR, nullptr);
    }
}

void connection_impl::finish_slot(send_slot& s, ibv_wc_status status, const ibv_wc*) noexcept {
    retire_slot(s, status);
}

// Inlined into `on_send_complete`, every completion's path (one call less per completion);
// `finish_slot` is it for the other callers (flushes at teardown).
[[gnu::always_inline]] inline void connection_impl::retire_slot(send_slot& s, ibv_wc_status status) noexcept {
    bool ok = status == IBV_WC_SUCCESS;
    op_completion* notify = std::exchange(s.notify, nullptr);
    std::exception_ptr notify_error;
    switch (s.kind) {
    case send_slot::op::fin:
        // A peer that ended its own side and left no longer cares that ours ended: not an error.
        ok = ok || _peer_fin;
        if (ok) {
            _fin_done_ok = true;
        }
        if (_fin_done) {
            auto pr = std::move(*_fin_done);
            _fin_done.reset();
            if (ok) {
                pr.set_value();
            } else {
                pr.set_exception(op_error(s, status));
            }
        }
        if (_close_after_fin) {
            close(closed_error());
        }
        break;
    case send_slot::op::read:
    case send_slot::op::write:
    case send_slot::op::write_imm:
        if (notify) {
            if (!ok) {
                notify_error = op_error(s, status);
            }
        } else if (ok) {
            s.done.set_value();
        } else {
            s.done.set_exception(op_error(s, status));
        }
        break;
    case send_slot::op::fetch_add:
    case send_slot::op::compare_swap:
        if (ok) {
            s.value.set_value(*atomic_result(s));
        } else {
            s.value.set_exception(op_error(s, status));
        }
        break;
    case send_slot::op::bind_window:
    case send_slot::op::invalidate_window:
        // A bound window stays unusable for reuse unless an invalidate completed (see
        // memory_window.hh): after a failed bind or invalidate it is deallocated when dropped.
        if (ok && s.kind == send_slot::op::bind_window && s.window->mw) {
            s.window->mw->rkey = s.wr.bind_mw.rkey;
        }
        if (ok && s.kind == send_slot::op::invalidate_window) {
            s.window->reusable = true;
            s.window->bound = {};
        }
        if (ok) {
            s.done.set_value();
        } else {
            s.done.set_exception(op_error(s, status));
        }
        break;
    default:
        break;
    }
    s.copy.reset();
    s.held.reset();
    s.window.reset();
    s.kind = send_slot::op::free;
    // Last: the slot is free and its memory released, so the receiver may issue operations that
    // take it again, or close the connection.
    if (notify) {
        notify->complete(std::move(notify_error));
    }
}

[[gnu::always_inline]] inline void connection_impl::on_send_complete(send_slot& s,
                                                                     const ibv_wc& wc) noexcept {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    // Completions of one send queue arrive in order: this one retires every unsignaled request
    // posted before it (they succeeded; after an error each request completes on its own).
    const uint64_t target = s.seq;
    // The error is described before the slot is retired: retiring frees it (its kind with it).
    std::exception_ptr failure;
    if (wc.status != IBV_WC_SUCCESS && _state != state::closing && _state != state::closed) {
        failure = wc.status != IBV_WC_WR_FLUSH_ERR ? op_error(s, wc.status) : closed_error();
    }
    if (failure && !_error) {
        // Set before the retired slots' completions run: one of them may close the connection,
        // which then keeps this reason rather than a plain "closed".
        _error = failure;
    }
    while (send_slot* t = _ring.retire_up_to(target)) {
        retire_slot(*t, t == &s ? wc.status : IBV_WC_SUCCESS);
    }
    if (failure && _state != state::closing && _state != state::closed) {
        qp_log.debug("connection to {}: {}", _peer_addr.to_string(), ibv_wc_status_str(wc.status));
        close(failure);
    }
    if (_state == state::established) {
        serve_senders();
    }
}

// The CQ poller's call for a send slot: `on_send_complete` is inlined here (its only caller),
// one call less per completion.
void send_slot::complete(const ibv_wc& wc) noexcept {
    conn->on_send_complete(*this, wc);
}

void connection_impl::serve_waiting_senders() noexcept {
    // Fair between the stream and queued one-sided operations: the first queued operation gets
    // its turn before the stream takes what it can (else a busy stream took every credit and a
    // queued WRITE_WITH_IMM waited for as long as the stream had bytes), then the rest.
    if (_ring.has_waiters()) {
        wake_space_waiters(1);
    }
    transmit();
    wake_space_waiters();
}

bool connection_impl::consume_data_credit() noexcept {
    if (!_credits.consume_data_credit()) {
        return false; // the peer sent more than it was granted
    }
    _srq->consumed();
    return true;
}

void connection_impl::withdraw_untold_credits() noexcept {
    // Credits granted but not told yet (they wait to ride on a message) are only this side's
    // bookkeeping: they go, down to the idle window or to what the peer was told, whichever is
    // more. The peer keeps every credit it holds.
    const uint32_t cut = _credits.withdraw_untold();
    _srq->release(cut);
    _stats.credits_withdrawn += cut;
}

bool connection_impl::close_idle_window() noexcept {
    if (_state != state::established || !_credits.open()) {
        return false;
    }
    if (_credits.take_received_since_sweep()) {
        return true; // not quiet yet
    }
    // Quiet for a whole period with the window open: the window closes. A peer that went quiet
    // holding told credits above its idle window gives them back itself (give_back_idle_credits
    // on its side); the untold ones would otherwise stay promised for as long as it is quiet
    // (a credit-only message is due only when the peer runs low, and a quiet peer never does).
    withdraw_untold_credits();
    return false;
}

bool connection_impl::sweep_idle() noexcept {
    const bool receiving = close_idle_window();
    const bool sending = give_back_idle_credits();
    return receiving || sending;
}

bool connection_impl::consume_ctrl_credit() noexcept {
    if (!_credits.consume_ctrl_credit()) {
        return false;
    }
    _srq->consumed();
    if (_credits.ctrl_returns_due()) {
        need_post(); // the peer used them all: they go back on a message of their own if need be
    }
    return true;
}

void connection_impl::adapt_window() noexcept {
    // The window opens while the peer runs low and closes when it stays calm (see
    // credit_window::adapt); an opened window is granted at once, and closed again once quiet.
    if (_credits.adapt()) {
        grant_credits();
        if (_opts.give_back_after.count() > 0) {
            _ctx->watch_give_back(_opts.give_back_after);
        }
    }
}

void connection_impl::on_receive(const ibv_wc& wc, buffer& buf) noexcept {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    auto protocol_error = [&](const std::string& what) {
        close(std::make_exception_ptr(
            connection_closed("RDMA connection to " + _peer_addr.to_string() + ": protocol error: " + what)));
    };
    if (wc.status != IBV_WC_SUCCESS) {
        consume_data_credit(); // if the peer had one: the receive is gone either way
        close(std::make_exception_ptr(
            connection_closed(fmt::format("RDMA receive on the connection to {}: {}", _peer_addr.to_string(),
                                          ibv_wc_status_str(wc.status)))));
        return;
    }
    if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        if (!consume_data_credit()) {
            protocol_error("WRITE_WITH_IMM without a credit");
            return;
        }
        ++_stats.immediates_received;
        _credits.hold_for_user();
        adapt_window();
        deliver_immediate(ntohl(wc.imm_data));
        return; // the buffer was not used: it is reposted
    }
    if (wc.opcode != IBV_WC_RECV || !(wc.wc_flags & IBV_WC_WITH_IMM)) {
        protocol_error("a message without immediate data");
        return;
    }
    imm_fields f = decode_imm(ntohl(wc.imm_data));
    if (f.kind != msg_kind::give_back) {
        _credits.add_send_credits(f.credits);
        if (f.credits && _credits.holds_more_than(std::max(1u, uint32_t(_peer.credits))) &&
            _opts.give_back_after.count() > 0) {
            _ctx->watch_give_back(_opts.give_back_after); // more than the peer's idle window
        }
    }
    _credits.add_ctrl_credits(f.ctrl_credits);
    switch (f.kind) {
    case msg_kind::ctrl:
        if (!consume_ctrl_credit()) {
            protocol_error("a credit message without a control credit");
            return;
        }
        ++_stats.ctrl_received;
        break;
    case msg_kind::give_back:
        // It travels on one of the credits it gives back (a control credit may be owed to it).
        if (!consume_data_credit()) {
            protocol_error("a give-back without a credit");
            return;
        }
        // The peer holds at most what it was told of; it hands those back unused.
        if (!_credits.take_back(f.credits)) {
            protocol_error(fmt::format("gave back {} more credits, holding at most {}", f.credits,
                                       _credits.peer_holds()));
            return;
        }
        _srq->release(f.credits); // their receives serve other connections' promises
        _stats.credits_taken_back += f.credits + 1;
        withdraw_untold_credits(); // and the credits not told yet, down to the idle window
        grant_credits();           // a peer left below the idle window gets it back
        break;
    case msg_kind::fin:
        if (!consume_data_credit()) {
            protocol_error("end of stream without a credit");
            return;
        }
        _peer_fin = true;
        if (_rx.empty() && rx_waiting()) {
            if (_eof_flag) {
                *_eof_flag = true;
            }
            wake_reader(net::temporary_buffer());
        }
        break;
    case msg_kind::data:
        if (!consume_data_credit()) {
            protocol_error("data without a credit");
            return;
        }
        ++_stats.messages_received;
        _stats.bytes_received += wc.byte_len;
        _credits.hold_for_user();
        adapt_window();
        if (_input_closed || wc.byte_len == 0) {
            consumed(1); // nobody will read it: the buffer is reposted, the credit returned
        } else {
            deliver_rx(std::move(buf).into_temporary_buffer(wc.byte_len));
        }
        break;
    default:
        protocol_error("unknown message kind");
        return;
    }
    if (f.credits || f.ctrl_credits) {
        serve_senders();
    }
}

void connection_impl::consumed(unsigned n) noexcept {
    _credits.taken_by_user(n);
    grant_credits();
}

void connection_impl::grant_credits() noexcept {
    if (_state != state::established && _state != state::connecting) {
        return;
    }
    // Batched (a quarter window at a time: one chained SRQ post) unless the peer runs low.
    const uint32_t want = _credits.grant_wanted();
    if (want == 0) {
        return;
    }
    uint32_t got = _srq->reserve(want);
    _credits.granted_more(got);
    if (got < want && !_starved) {
        _starved = true;
        _ctx->mark_starved(this);
    }
    if (_credits.credits_to_return()) {
        need_post();
    }
}

bool connection_impl::give_back_idle_credits() noexcept {
    const uint32_t keep = std::max(1u, uint32_t(_peer.credits)); // the peer's idle window
    if (_state != state::established || _fin_posted || !_credits.holds_more_than(keep)) {
        return false;
    }
    if (_credits.take_sent_since_sweep()) {
        return true; // not quiet yet
    }
    if (_credits.reserved_credits() || _ring.has_waiters() || !tx_empty() || free_slots() <= 1) {
        return true; // busy after all: later
    }
    // The message itself uses one of the credits handed back; bits 23-0 carry the others.
    const uint32_t k = _credits.give_back(keep, max_imm_credits);
    send_slot& s = _ring.next_slot();
    s.kind = send_slot::op::ctrl;
    s.wr.opcode = IBV_WR_SEND_WITH_IMM;
    s.wr.num_sge = 0;
    s.wr.sg_list = nullptr;
    s.wr.imm_data = htonl(encode_imm({msg_kind::give_back, k - 1, take_ctrl_returns()}));
    _stats.credits_given_back += k;
    append(s);
    return false;
}

bool connection_impl::retry_credits() noexcept {
    if (_state != state::established) {
        _starved = false;
        return true;
    }
    const uint32_t want = _credits.missing();
    uint32_t got = want ? _srq->reserve(want) : 0;
    _credits.granted_more(got);
    if (_credits.credits_to_return()) {
        need_post();
    }
    _tx_starved = false;
    if (!tx_empty()) {
        transmit(); // sets _tx_starved again when the pool is still dry
    }
    if (got < want || _tx_starved) {
        return false; // stays on the shard's starved list: retried next poll
    }
    _starved = false;
    return true;
}

uint32_t connection_impl::take_ctrl_returns() noexcept {
    const uint32_t owed = _credits.ctrl_to_return();
    if (owed == 0) {
        return 0;
    }
    // Each control message received freed its receive (reposted): promise it again.
    uint32_t k = _srq->reserve(std::min(owed, max_imm_ctrl_credits));
    _credits.return_ctrl_credits(k);
    return k;
}

void connection_impl::queue_ctrl() noexcept {
    // Called by `maybe_queue_ctrl` with a slot and a control credit free, and credits or acks due.
    // Credits ride on data messages for free; a message of their own costs a whole send (on
    // rxe, a system call that runs the protocol). So they get one only when the peer is down to
    // half its window: in request/response traffic the next reply carries them, and a one-way
    // sender still has half a window in flight while they travel.
    // Below 4 credits (the idle window) they are due only once the peer has none left: in
    // request/response traffic the reply always carries them first, and a one-way sender that
    // runs out opens the window (adapt_window) at the message that emptied it. From 4 up, a
    // message that just arrived is answered by tasks that run after this poll, so a due
    // credit-only message waits one reactor round for a reply to carry the credits instead.
    if (_credits.hold_ctrl_message()) {
        _ctx->post_next_round(this);
        return;
    }
    send_slot& s = _ring.next_slot();
    s.kind = send_slot::op::ctrl;
    s.wr.opcode = IBV_WR_SEND_WITH_IMM;
    s.wr.num_sge = 0;
    s.wr.sg_list = nullptr;
    s.wr.imm_data = htonl(
        encode_imm({msg_kind::ctrl, _credits.take_credit_returns(max_imm_credits), take_ctrl_returns()}));
    _credits.use_ctrl_credit();
    ++_stats.ctrl_sent;
    append(s);
}

future<> connection_impl::wait_turn(bool needs_credit) {
    // The continuation holds the connection: it may run after everybody else dropped it.
    return _ring.queue_waiter(needs_credit).then([this, hold = make_ref(), needs_credit] {
        if (!usable()) {
            release_turn(needs_credit);
            return make_exception_future<>(_error ? _error : closed_error());
        }
        // The reservation made when this waiter was woken stays until the operation takes its
        // slot (prepare_one_sided): it is issued by the next continuation, a separate task, and
        // the stream must not take the slot or credit in between.
        _ring.turn_ready();
        return make_ready_future<>();
    });
}

void connection_impl::take_turn(bool needs_credit) noexcept {
    if (_ring.take_ready_turn()) {
        // A queued operation whose turn came (turns are taken in call order): its reserved
        // slot (and credit) become the ones it uses now.
        release_turn(needs_credit);
    }
}

void connection_impl::release_turn(bool needs_credit) noexcept {
    _ring.unreserve_slot();
    if (needs_credit) {
        _credits.unreserve_credit();
    }
}

void connection_impl::wake_space_waiters(unsigned max) noexcept {
    // In call order: a waiter that cannot go yet holds back everyone behind it. Each one woken
    // gets its slot (and credit) reserved, so nothing else takes them before its task runs.
    for (unsigned woken = 0; _ring.has_waiters() && woken < max; ++woken) {
        if (usable()) {
            const bool needs_credit = _ring.first_needs_credit();
            if (!can_issue(needs_credit)) {
                break;
            }
            if (needs_credit) {
                _credits.reserve_credit();
            }
            _ring.wake_first();
        } else {
            _ring.fail_first(_error ? _error : closed_error());
        }
    }
}

} // namespace shoal::net::rdma::internal
