// The credit window of a connection (SEND/RECV flow control arithmetic), without a device:
// consuming, granting, returning, adapting, withdrawing and giving back credits, and the guards
// that keep every counter from wrapping.
#include "net/rdma/credit_window.hh"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

using shoal::net::rdma::internal::credit_limits;
using shoal::net::rdma::internal::credit_window;

namespace {

constexpr uint32_t max_imm = (1u << 24) - 1;

/// A window of `credits` (idle 2, 2 control credits) whose initial credits were promised.
credit_window set_up(uint32_t credits = 16, uint32_t idle = 2, uint32_t ctrl = 2) {
    credit_window w({credits, idle, ctrl});
    w.grant_initial();
    return w;
}

/// The peer sends `n` data messages that the user takes at once (their credits are owed back).
void receive_taken(credit_window& w, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
        ASSERT_TRUE(w.consume_data_credit());
        w.granted_more(1); // the taken message's receive, promised again
    }
}

} // namespace

TEST(credit_window, starts_at_the_idle_window_with_nothing_held) {
    credit_window w({16, 4, 3});
    EXPECT_EQ(w.window(), 4u);
    EXPECT_EQ(w.granted(), 0u);
    EXPECT_EQ(w.send_credits(), 0u);
    EXPECT_EQ(w.free_credits(), 0u);
    EXPECT_FALSE(w.credits_due());
    EXPECT_FALSE(w.ctrl_message_due());
    w.grant_initial();
    EXPECT_EQ(w.granted(), 4u);
    EXPECT_EQ(w.ctrl_granted(), 3u);
    EXPECT_EQ(w.credits_to_return(), 0u) << "the initial credits travel in the private data";
    EXPECT_EQ(w.peer_holds(), 4u);
    EXPECT_EQ(w.missing(), 0u);
    EXPECT_EQ(w.release_all(), 7u);
    EXPECT_EQ(w.granted(), 0u);
    EXPECT_EQ(w.ctrl_granted(), 0u);
    EXPECT_EQ(w.release_all(), 0u);
}

TEST(credit_window, a_data_credit_is_consumed_only_when_the_peer_was_told_of_it) {
    credit_window w = set_up();
    EXPECT_FALSE(w.take_received_since_sweep());
    EXPECT_TRUE(w.consume_data_credit());
    EXPECT_TRUE(w.take_received_since_sweep());
    EXPECT_FALSE(w.take_received_since_sweep()) << "the sweep's flag clears when read";
    EXPECT_TRUE(w.consume_data_credit());
    EXPECT_EQ(w.granted(), 0u);
    EXPECT_TRUE(w.take_received_since_sweep());
    // No credit left: refused without wrapping.
    EXPECT_FALSE(w.consume_data_credit());
    EXPECT_EQ(w.granted(), 0u);
    EXPECT_FALSE(w.take_received_since_sweep());
    // Granted but not told: the peer cannot hold them yet.
    w.granted_more(3);
    EXPECT_EQ(w.peer_holds(), 0u);
    EXPECT_FALSE(w.consume_data_credit());
    EXPECT_EQ(w.granted(), 3u);
    EXPECT_EQ(w.take_credit_returns(max_imm), 3u);
    EXPECT_TRUE(w.consume_data_credit());
    EXPECT_EQ(w.peer_holds(), 2u);
}

TEST(credit_window, credit_returns_are_bounded_by_what_one_message_carries) {
    credit_window w = set_up();
    w.granted_more(10);
    EXPECT_EQ(w.take_credit_returns(4), 4u);
    EXPECT_EQ(w.credits_to_return(), 6u);
    EXPECT_EQ(w.take_credit_returns(max_imm), 6u);
    EXPECT_EQ(w.take_credit_returns(max_imm), 0u);
    EXPECT_EQ(w.credits_to_return(), 0u);
    EXPECT_EQ(w.granted(), 12u);
}

TEST(credit_window, credits_are_due_at_half_the_window_or_when_a_small_one_is_empty) {
    // Below a window of 4: due only once the peer has none left.
    credit_window small = set_up(16, 2, 2);
    ASSERT_TRUE(small.consume_data_credit());
    ASSERT_TRUE(small.consume_data_credit());
    EXPECT_EQ(small.peer_holds(), 0u);
    EXPECT_FALSE(small.credits_due()) << "nothing is owed yet";
    small.granted_more(1);
    EXPECT_TRUE(small.credits_due());
    EXPECT_TRUE(small.ctrl_message_due());
    (void)small.take_credit_returns(max_imm);
    small.granted_more(1);
    EXPECT_EQ(small.peer_holds(), 1u);
    EXPECT_FALSE(small.credits_due()) << "one credit left: a request's reply carries the other";
    // From 4 up: due at half the window.
    credit_window big = set_up(16, 8, 2);
    receive_taken(big, 3);
    EXPECT_EQ(big.peer_holds(), 5u);
    EXPECT_FALSE(big.credits_due());
    receive_taken(big, 1);
    EXPECT_EQ(big.peer_holds(), 4u);
    EXPECT_TRUE(big.credits_due());
}

TEST(credit_window, a_due_credit_message_waits_one_round_unless_control_credits_are_due) {
    credit_window w = set_up(16, 8, 2);
    receive_taken(w, 4);
    ASSERT_TRUE(w.ctrl_message_due());
    EXPECT_TRUE(w.hold_ctrl_message()) << "a reply may carry the credits";
    EXPECT_FALSE(w.hold_ctrl_message()) << "held once already: it leaves";
    EXPECT_TRUE(w.hold_ctrl_message()) << "a new hold after it left";
    w.drop_ctrl_hold();
    EXPECT_TRUE(w.hold_ctrl_message());
    w.drop_ctrl_hold();
    // The peer used its control credits: they go back at once.
    ASSERT_TRUE(w.consume_ctrl_credit());
    ASSERT_TRUE(w.consume_ctrl_credit());
    EXPECT_TRUE(w.ctrl_returns_due());
    EXPECT_FALSE(w.hold_ctrl_message());
    // A peer with no data credit left gets them at once too.
    credit_window empty = set_up(16, 2, 2);
    ASSERT_TRUE(empty.consume_data_credit());
    ASSERT_TRUE(empty.consume_data_credit());
    empty.granted_more(2);
    EXPECT_FALSE(empty.hold_ctrl_message());
}

TEST(credit_window, control_credits_are_consumed_owed_and_returned_without_wrapping) {
    credit_window w = set_up(16, 2, 3);
    EXPECT_TRUE(w.consume_ctrl_credit());
    EXPECT_FALSE(w.ctrl_returns_due());
    EXPECT_TRUE(w.consume_ctrl_credit());
    EXPECT_TRUE(w.consume_ctrl_credit());
    EXPECT_TRUE(w.ctrl_returns_due());
    EXPECT_FALSE(w.consume_ctrl_credit()) << "a control message without a control credit";
    EXPECT_EQ(w.ctrl_granted(), 0u);
    EXPECT_EQ(w.ctrl_to_return(), 3u);
    w.return_ctrl_credits(2); // the SRQ had receives for two
    EXPECT_EQ(w.ctrl_granted(), 2u);
    EXPECT_EQ(w.ctrl_to_return(), 1u);
    w.return_ctrl_credits(5); // more than owed: only what is owed
    EXPECT_EQ(w.ctrl_granted(), 3u);
    EXPECT_EQ(w.ctrl_to_return(), 0u);
    EXPECT_FALSE(w.ctrl_message_due());
}

TEST(credit_window, grants_are_batched_by_a_quarter_window_unless_the_peer_runs_low) {
    credit_window w = set_up(16, 16, 2);
    EXPECT_EQ(w.window(), 16u);
    receive_taken(w, 3);
    (void)w.take_credit_returns(max_imm);
    // Three receives used and not promised again yet:
    ASSERT_TRUE(w.consume_data_credit());
    ASSERT_TRUE(w.consume_data_credit());
    ASSERT_TRUE(w.consume_data_credit());
    EXPECT_EQ(w.missing(), 3u);
    EXPECT_EQ(w.grant_wanted(), 0u) << "under a quarter missing, the peer above half: wait";
    ASSERT_TRUE(w.consume_data_credit());
    EXPECT_EQ(w.grant_wanted(), 4u) << "a quarter window";
    // Messages held for the user count against the window until taken.
    w.hold_for_user();
    w.hold_for_user();
    EXPECT_EQ(w.missing(), 2u);
    w.taken_by_user(1);
    EXPECT_EQ(w.missing(), 3u);
    w.taken_by_user(5); // more than held: none held, no wrap
    EXPECT_EQ(w.unconsumed(), 0u);
    EXPECT_EQ(w.missing(), 4u);
    w.hold_for_user();
    w.drop_unconsumed();
    EXPECT_EQ(w.unconsumed(), 0u);
    // The peer down to half the window: every missing receive, however few.
    credit_window low = set_up(16, 16, 2);
    for (int i = 0; i < 8; ++i) {
        ASSERT_TRUE(low.consume_data_credit());
    }
    low.granted_more(7);
    EXPECT_EQ(low.peer_holds(), 8u);
    EXPECT_EQ(low.missing(), 1u);
    EXPECT_EQ(low.grant_wanted(), 1u);
    low.granted_more(1);
    EXPECT_EQ(low.missing(), 0u);
    EXPECT_EQ(low.grant_wanted(), 0u);
    // More granted than the window (it closed): nothing missing, no wrap.
    credit_window closed = set_up(16, 2, 2);
    closed.granted_more(10);
    EXPECT_EQ(closed.missing(), 0u);
    EXPECT_EQ(closed.grant_wanted(), 0u);
}

TEST(credit_window, the_window_doubles_while_the_peer_runs_low_up_to_credits) {
    credit_window w = set_up(16, 2, 2);
    std::vector<uint32_t> seen;
    // A one-way sender that drains the window every time.
    for (int round = 0; round < 6; ++round) {
        while (w.peer_holds() > 0) {
            ASSERT_TRUE(w.consume_data_credit());
        }
        if (w.adapt()) {
            seen.push_back(w.window());
        }
        w.granted_more(w.missing());
        (void)w.take_credit_returns(max_imm);
    }
    EXPECT_EQ(seen, (std::vector<uint32_t>{4, 8, 16})) << "it stops at credits";
    EXPECT_EQ(w.window(), 16u);
    EXPECT_EQ(w.granted(), 16u);
    // A window that does not divide evenly is capped at credits.
    credit_window odd = set_up(5, 3, 2);
    ASSERT_TRUE(odd.consume_data_credit());
    ASSERT_TRUE(odd.consume_data_credit());
    ASSERT_TRUE(odd.consume_data_credit());
    EXPECT_TRUE(odd.adapt());
    EXPECT_EQ(odd.window(), 5u);
}

TEST(credit_window, a_calm_window_halves_towards_idle_credits_and_no_further) {
    credit_window calm = set_up(16, 2, 2);
    // Open it to 16.
    for (int round = 0; round < 3; ++round) {
        while (calm.peer_holds() > 0) {
            ASSERT_TRUE(calm.consume_data_credit());
        }
        ASSERT_TRUE(calm.adapt());
        calm.granted_more(calm.missing());
        (void)calm.take_credit_returns(max_imm);
    }
    ASSERT_EQ(calm.window(), 16u);
    // Messages that leave the peer well supplied: a whole window of them halves it.
    std::vector<uint32_t> windows;
    for (int i = 0; i < 64; ++i) {
        ASSERT_TRUE(calm.consume_data_credit());
        calm.granted_more(1);
        (void)calm.take_credit_returns(max_imm);
        EXPECT_FALSE(calm.adapt());
        if (windows.empty() || windows.back() != calm.window()) {
            windows.push_back(calm.window());
        }
    }
    EXPECT_EQ(windows, (std::vector<uint32_t>{16, 8, 4, 2}));
    // At credits already and busy: no change, nothing to grant.
    credit_window w = set_up(16, 16, 2);
    while (w.peer_holds() > 0) {
        ASSERT_TRUE(w.consume_data_credit());
    }
    EXPECT_FALSE(w.adapt());
    EXPECT_EQ(w.window(), 16u);
}

TEST(credit_window, withdrawing_takes_only_untold_credits_down_to_the_idle_window) {
    // Granted 16, of which 6 told (the peer holds them) and 10 untold: the untold go, down to
    // the idle window or what the peer holds, whichever is more.
    credit_window w = set_up(16, 2, 2);
    w.granted_more(14);
    (void)w.take_credit_returns(4); // told: 2 + 4
    ASSERT_EQ(w.peer_holds(), 6u);
    ASSERT_EQ(w.credits_to_return(), 10u);
    EXPECT_EQ(w.withdraw_untold(), 10u);
    EXPECT_EQ(w.granted(), 6u);
    EXPECT_EQ(w.credits_to_return(), 0u);
    EXPECT_EQ(w.peer_holds(), 6u) << "the peer keeps every credit it holds";
    EXPECT_EQ(w.window(), 2u);
    // The peer holds less than the idle window: the untold ones fill it up to idle.
    credit_window v = set_up(16, 4, 2);
    for (int i = 0; i < 4; ++i) {
        ASSERT_TRUE(v.consume_data_credit());
    }
    v.granted_more(6);
    (void)v.take_credit_returns(1);
    ASSERT_EQ(v.peer_holds(), 1u);
    EXPECT_EQ(v.withdraw_untold(), 2u);
    EXPECT_EQ(v.granted(), 4u);
    EXPECT_EQ(v.credits_to_return(), 3u);
    // Nothing above the target: nothing withdrawn (no wrap).
    credit_window idle = set_up(16, 2, 2);
    EXPECT_EQ(idle.withdraw_untold(), 0u);
    EXPECT_EQ(idle.granted(), 2u);
}

TEST(credit_window, withdrawing_closes_an_open_window_and_resets_calm) {
    credit_window w = set_up(16, 2, 2);
    while (w.peer_holds() > 0) {
        ASSERT_TRUE(w.consume_data_credit());
    }
    ASSERT_TRUE(w.adapt());
    w.granted_more(w.missing());
    EXPECT_TRUE(w.open());
    (void)w.withdraw_untold();
    EXPECT_EQ(w.window(), 2u);
    EXPECT_FALSE(w.open());
    // Open only by what is granted (told credits above idle): still open after a withdraw.
    credit_window told = set_up(16, 2, 2);
    told.granted_more(4);
    (void)told.take_credit_returns(max_imm);
    EXPECT_EQ(told.withdraw_untold(), 0u);
    EXPECT_TRUE(told.open());
}

TEST(credit_window, a_give_back_larger_than_what_the_peer_holds_is_refused) {
    credit_window w = set_up(16, 2, 2);
    w.granted_more(10);
    (void)w.take_credit_returns(6); // the peer holds 8, 4 untold
    ASSERT_EQ(w.peer_holds(), 8u);
    EXPECT_FALSE(w.take_back(9));
    EXPECT_EQ(w.granted(), 12u) << "a refused give-back changes nothing";
    EXPECT_TRUE(w.take_back(6));
    EXPECT_EQ(w.granted(), 6u);
    EXPECT_EQ(w.peer_holds(), 2u);
    EXPECT_TRUE(w.take_back(2));
    EXPECT_FALSE(w.take_back(1));
    EXPECT_EQ(w.peer_holds(), 0u);
    EXPECT_EQ(w.credits_to_return(), 4u);
}

TEST(credit_window, send_credits_are_used_reserved_and_never_go_below_zero_free) {
    credit_window w = set_up();
    w.add_send_credits(3);
    w.add_ctrl_credits(2);
    EXPECT_EQ(w.send_credits(), 3u);
    EXPECT_EQ(w.send_ctrl_credits(), 2u);
    EXPECT_EQ(w.free_credits(), 3u);
    w.reserve_credit();
    w.reserve_credit();
    EXPECT_EQ(w.free_credits(), 1u);
    EXPECT_FALSE(w.take_sent_since_sweep());
    w.use_send_credit();
    w.use_send_credit();
    EXPECT_TRUE(w.take_sent_since_sweep());
    EXPECT_FALSE(w.take_sent_since_sweep());
    // Reserved credits above the held ones (a reserved credit the stream raced for): none free.
    w.reserve_credit();
    EXPECT_EQ(w.send_credits(), 1u);
    EXPECT_EQ(w.reserved_credits(), 3u);
    EXPECT_EQ(w.free_credits(), 0u);
    w.unreserve_credit();
    w.unreserve_credit();
    w.unreserve_credit();
    EXPECT_EQ(w.free_credits(), 1u);
    w.use_ctrl_credit();
    EXPECT_EQ(w.send_ctrl_credits(), 1u);
    // A forged credit (fault injection) is spent like any other.
    w.forge_send_credit();
    EXPECT_EQ(w.free_credits(), 2u);
}

TEST(credit_window, idle_credits_above_the_peers_idle_window_are_given_back) {
    credit_window w = set_up();
    w.add_send_credits(16);
    EXPECT_TRUE(w.holds_more_than(2));
    EXPECT_FALSE(w.holds_more_than(16));
    EXPECT_EQ(w.give_back(2, max_imm), 14u);
    EXPECT_EQ(w.send_credits(), 2u);
    EXPECT_FALSE(w.holds_more_than(2));
    EXPECT_EQ(w.give_back(2, max_imm), 0u) << "nothing above the idle window";
    EXPECT_EQ(w.give_back(5, max_imm), 0u) << "fewer than kept: no wrap";
    EXPECT_EQ(w.send_credits(), 2u);
    // At most what one message can say.
    w.add_send_credits(100);
    EXPECT_EQ(w.give_back(2, 64), 64u);
    EXPECT_EQ(w.send_credits(), 38u);
}
