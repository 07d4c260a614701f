#pragma once

#include <algorithm>
#include <cassert>
#include <cstdint>

namespace shoal::net::rdma::internal {

/// The bounds a connection's credit window works within (its `connection_options`, clamped).
struct credit_limits {
    uint32_t credits = 16;     ///< largest receive window (data credits promised to the peer)
    uint32_t idle_credits = 2; ///< the receive window of a calm or quiet peer (1..credits)
    uint32_t ctrl_credits = 2; ///< control credits promised to the peer (for credit-only messages)
};

/// The arithmetic of a connection's SEND/RECV flow control, both ways: the credits this side
/// holds to send with (and those reserved for queued one-sided operations), and the credits it
/// promised the peer (its receive window, what the peer was told of, what it owes back). Plain
/// counters: the connection posts the receives and sends the messages, asking the window how
/// many and when. No counter wraps: what the peer's messages drive (consuming, giving back)
/// refuses or clamps; what the connection calls after its own check (using a send or control
/// credit, ending a reservation) asserts that check.
class credit_window {
public:
    /// A window within `limits`, open to `idle_credits`, nothing granted or held.
    explicit credit_window(credit_limits limits = {}) noexcept
        : _limits(limits)
        , _window(limits.idle_credits) {}

    /// The bounds it works within.
    const credit_limits& limits() const noexcept { return _limits; }

    // --- what this side may send

    /// Data credits held: SENDs (and WRITE_WITH_IMMs) the peer has receives for.
    uint32_t send_credits() const noexcept { return _send_credits; }
    /// Control credits held: credit-only messages the peer has receives for.
    uint32_t send_ctrl_credits() const noexcept { return _send_ctrl_credits; }
    /// Data credits reserved for one-sided operations woken for their turn.
    uint32_t reserved_credits() const noexcept { return _reserved_credits; }
    /// Data credits nobody holds: held and not reserved.
    uint32_t free_credits() const noexcept {
        return _send_credits > _reserved_credits ? _send_credits - _reserved_credits : 0;
    }
    /// The peer granted `n` data credits (at setup or on a message).
    void add_send_credits(uint32_t n) noexcept { _send_credits += n; }
    /// The peer granted `n` control credits (at setup or on a message).
    void add_ctrl_credits(uint32_t n) noexcept { _send_ctrl_credits += n; }
    /// A message that takes one of the peer's receives leaves (the caller checked one is held).
    void use_send_credit() noexcept {
        assert(_send_credits > 0);
        --_send_credits;
        _sent_since_sweep = true;
    }
    /// A credit-only message leaves (the caller checked a control credit is held).
    void use_ctrl_credit() noexcept {
        assert(_send_ctrl_credits > 0);
        --_send_ctrl_credits;
    }
    /// A send without a credit (fault injection: a hostile peer): the credit it takes was never
    /// granted.
    void forge_send_credit() noexcept { ++_send_credits; }
    /// A woken one-sided operation holds a credit until it is issued.
    void reserve_credit() noexcept { ++_reserved_credits; }
    /// Gives back a credit `reserve_credit` held (the caller checked one is reserved).
    void unreserve_credit() noexcept {
        assert(_reserved_credits > 0);
        --_reserved_credits;
    }
    /// Whether it holds more data credits than `keep` (the peer's idle window).
    bool holds_more_than(uint32_t keep) const noexcept { return _send_credits > keep; }
    /// Hands back the data credits held above `keep`, at most `max` (what one message can say);
    /// returns how many (0 when it holds no more than `keep`).
    uint32_t give_back(uint32_t keep, uint32_t max) noexcept {
        const uint32_t k = _send_credits > keep ? std::min(_send_credits - keep, max) : 0;
        _send_credits -= k;
        return k;
    }
    /// Whether a data credit was used since the last call (the give-back sweep's quiet test).
    bool take_sent_since_sweep() noexcept {
        const bool sent = _sent_since_sweep;
        _sent_since_sweep = false;
        return sent;
    }

    // --- what the peer may send

    /// The receive window now (`idle_credits`..`credits`, see `adapt`).
    uint32_t window() const noexcept { return _window; }
    /// Data credits promised to the peer, told or not yet.
    uint32_t granted() const noexcept { return _granted; }
    /// Control credits promised to the peer.
    uint32_t ctrl_granted() const noexcept { return _ctrl_granted; }
    /// Data credits granted and not yet told to the peer (they ride on the next message).
    uint32_t credits_to_return() const noexcept { return _credits_to_return; }
    /// Control messages received whose credit is not returned yet.
    uint32_t ctrl_to_return() const noexcept { return _ctrl_to_return; }
    /// Messages and events received and not yet taken by the user (their credits wait).
    uint32_t unconsumed() const noexcept { return _unconsumed; }
    /// Data credits the peer was told of and has not used: what it may send now.
    uint32_t peer_holds() const noexcept { return _granted - _credits_to_return; }

    /// At setup: the window and the control credits are promised (the peer learns them from
    /// the private data, not from a message).
    void grant_initial() noexcept {
        _granted = _window;
        _ctrl_granted = _limits.ctrl_credits;
    }
    /// At teardown: every promise ends; returns how many receives (data and control) it held.
    uint32_t release_all() noexcept {
        const uint32_t n = _granted + _ctrl_granted;
        _granted = _ctrl_granted = 0;
        return n;
    }

    /// A message or event that uses a data credit arrived: false when the peer had none (it sent
    /// more than it was told of; nothing changes), else the credit is used.
    bool consume_data_credit() noexcept {
        if (_granted <= _credits_to_return) {
            return false;
        }
        --_granted;
        _received_since_sweep = true;
        return true;
    }
    /// A credit-only or give-back message arrived on a control credit: false when the peer had
    /// none (a protocol error), else the credit is used and owed back.
    bool consume_ctrl_credit() noexcept {
        if (_ctrl_granted == 0) {
            return false;
        }
        --_ctrl_granted;
        ++_ctrl_to_return;
        return true;
    }
    /// Whether the peer used all its control credits (they go back on a message of their own
    /// if need be).
    bool ctrl_returns_due() const noexcept { return _ctrl_to_return >= _limits.ctrl_credits; }
    /// Whether the peer is low enough on data credits that returning them cannot wait for a
    /// data message to carry them: down to half the window (from a window of 4), or to none.
    bool credits_due() const noexcept {
        const uint32_t peer_has = peer_holds();
        return _credits_to_return > 0 && (_window < 4 ? peer_has == 0 : peer_has <= _window / 2);
    }
    /// Whether a credit-only message is wanted: credits or control credits are due.
    bool ctrl_message_due() const noexcept { return credits_due() || ctrl_returns_due(); }
    /// A due credit-only message: true when it should wait one reactor round for a reply to
    /// carry the credits instead (the peer still has some, no control credits are due, and it
    /// has not waited already); false when it should leave now.
    bool hold_ctrl_message() noexcept {
        if (!ctrl_returns_due() && peer_holds() > 0 && !_ctrl_held) {
            _ctrl_held = true;
            return true;
        }
        _ctrl_held = false;
        return false;
    }
    /// No credit-only message is due: a hold ends.
    void drop_ctrl_hold() noexcept { _ctrl_held = false; }

    /// Up to `max` of the data credits owed to the peer, to ride on a message now.
    uint32_t take_credit_returns(uint32_t max) noexcept {
        const uint32_t c = std::min(_credits_to_return, max);
        _credits_to_return -= c;
        return c;
    }
    /// `k` control credits (of `ctrl_to_return`) were promised again and ride on a message now.
    void return_ctrl_credits(uint32_t k) noexcept {
        k = std::min(k, _ctrl_to_return);
        _ctrl_granted += k;
        _ctrl_to_return -= k;
    }

    /// Receives the window lacks (granted and held for the user count against it); 0 when full.
    uint32_t missing() const noexcept {
        return _granted + _unconsumed < _window ? _window - _granted - _unconsumed : 0;
    }
    /// `missing`, batched: 0 unless a quarter window is missing or the peer is down to half the
    /// window (then every receive missing), so a grant is one chained SRQ post.
    uint32_t grant_wanted() const noexcept {
        const uint32_t want = missing();
        if (want < std::max(1u, _window / 4) && peer_holds() > _window / 2) {
            return 0;
        }
        return want;
    }
    /// `n` more receives were promised to the peer; they are owed to it until a message tells it.
    void granted_more(uint32_t n) noexcept {
        _granted += n;
        _credits_to_return += n;
    }

    /// After a data message: the peer is busy when the message left it under a quarter of the
    /// window (credits coming back travel on data or, at half a window, on a message of their
    /// own, so a calm peer stays well above that). Busy: the window doubles, up to `credits`,
    /// and this returns true (grant the receives). A whole window of messages without the peer
    /// running low: it halves, down to `idle_credits` (the credits above it are not returned as
    /// they are used, so their receives are released).
    bool adapt() noexcept {
        if (peer_holds() * 4 < _window) {
            _calm = 0;
            if (_window < _limits.credits) {
                _window = std::min(_limits.credits, _window * 2);
                return true;
            }
        } else if (++_calm >= _window && _window > _limits.idle_credits) {
            _calm = 0;
            _window = std::max(_limits.idle_credits, _window / 2);
        }
        return false;
    }
    /// Whether the window is open above `idle_credits` or more than that is granted (the idle
    /// sweep has something to close).
    bool open() const noexcept { return _window > _limits.idle_credits || _granted > _limits.idle_credits; }
    /// Whether the peer used a data credit since the last call (the idle sweep's quiet test).
    bool take_received_since_sweep() noexcept {
        const bool received = _received_since_sweep;
        _received_since_sweep = false;
        return received;
    }
    /// Closes the window to `idle_credits`, withdrawing the credits granted but not told to the
    /// peer down to `idle_credits` or what the peer holds, whichever is more (the peer keeps
    /// every credit it holds). Returns how many were withdrawn (their receives are released).
    uint32_t withdraw_untold() noexcept {
        const uint32_t target = std::max(_limits.idle_credits, peer_holds());
        const uint32_t cut = _granted > target ? std::min(_granted - target, _credits_to_return) : 0;
        _granted -= cut;
        _credits_to_return -= cut;
        _window = _limits.idle_credits;
        _calm = 0;
        return cut;
    }
    /// The peer handed back `n` credits it was told of: false when it holds fewer (a protocol
    /// error; nothing changes), else they are no longer granted (their receives are released).
    bool take_back(uint32_t n) noexcept {
        if (n > peer_holds()) {
            return false;
        }
        _granted -= n;
        return true;
    }

    /// A message or event was received for the user; its credit returns when it is taken.
    void hold_for_user() noexcept { ++_unconsumed; }
    /// The user took `n` messages or events (more than are held counts as all of them).
    void taken_by_user(uint32_t n) noexcept { _unconsumed -= std::min(n, _unconsumed); }
    /// Unread messages were dropped without being taken (the connection is aborted).
    void drop_unconsumed() noexcept { _unconsumed = 0; }

private:
    credit_limits _limits;
    // what this side may send
    uint32_t _send_credits = 0;
    uint32_t _send_ctrl_credits = 0;
    uint32_t _reserved_credits = 0; // of which reserved for woken one-sided operations
    // what the peer may send (receives reserved in the SRQ for it)
    uint32_t _window;           // receive window now (idle_credits..credits, see adapt)
    uint32_t _calm = 0;         // messages since the peer last ran low on credits
    uint32_t _granted = 0;      // data credits reserved for the peer (incl. not yet told)
    uint32_t _ctrl_granted = 0; // control credits reserved for the peer
    uint32_t _credits_to_return = 0;
    uint32_t _ctrl_to_return = 0;       // control messages received whose credit is not returned yet
    uint32_t _unconsumed = 0;           // messages/events received and not yet taken by the user
    bool _ctrl_held = false;            // a due credit-only message waits a round for a reply to carry it
    bool _sent_since_sweep = false;     // a send credit was used since the last give-back sweep
    bool _received_since_sweep = false; // the peer used a data credit since the last idle sweep
};

} // namespace shoal::net::rdma::internal
