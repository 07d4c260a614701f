// Zero-copy output, the message API and tagged immediates over RDMA (Soft-RoCE guest):
// output_stream gathers into registered pool memory that is sent in place (copies per message
// counted), a header and a payload leave in one SEND (several scatter-gather entries), messages
// keep their boundaries, and two users share one connection's immediates through tags while
// messages flow on the same connection.
#include "rdma_test_util.hh"

#include <array>
#include <string>
#include <vector>

using namespace shoal;
using namespace shoal::rdma_test;

namespace {

/// A pool buffer of `size` pattern bytes, as a temporary_buffer (registered memory).
net::temporary_buffer pool_pattern(size_t size, unsigned seed) {
    rdma::buffer b = rdma::shard_context::local().pool().allocate(size);
    fill_pattern(b.data(), size, seed);
    return std::move(b).into_temporary_buffer(size);
}

/// A connected pair on shard 0 (server side `s`) and shard 1 (client, run by `client`).
template <typename Client, typename Server>
future<> with_pair(rdma::listen_options lo, Client client, Server server) {
    const auto a = addr(next_port());
    rdma::listener l = rdma::listen_rc(a, lo);
    auto accepted = l.accept();
    auto c = submit_to(1, [a, client]() -> future<> {
        rdma::connection conn = co_await rdma::connect_rc(a);
        co_await client(std::move(conn));
    });
    rdma::connection srv = co_await std::move(accepted);
    co_await server(std::move(srv));
    co_await std::move(c);
}

/// Echoes every stream message back as it is (the received pool buffer, in place).
future<> stream_echo(rdma::connection c) {
    return echo_stream(c.socket());
}

/// Reads `n` bytes with read() (which never copies); returns them.
future<std::string> read_n(net::input_stream& in, size_t n) {
    std::string got;
    while (got.size() < n) {
        net::temporary_buffer b = co_await in.read();
        if (b.empty()) {
            break;
        }
        got.append(b.get(), b.size());
    }
    co_return got;
}

} // namespace

TEST(zero_copy, a_small_message_costs_at_most_one_copy) {
    int rc = run_rdma(2, []() -> future<> {
        co_await with_pair(
            {},
            [](rdma::connection c) -> future<> {
                net::connected_socket s = c.socket();
                net::input_stream in = s.input();
                net::output_stream out = s.output();
                const uint64_t regs = rdma::registration_count();
                // 128 B goes inline; 4000 and 12000 B (above rxe's inline size, below the 16 KiB
                // receive size) are sent in place from the pool buffer output_stream gathered into.
                for (size_t size : {size_t(128), size_t(4000), size_t(12000)}) {
                    const auto before = c.stats();
                    uint64_t worst = 0;
                    uint64_t total = 0;
                    constexpr int messages = 100;
                    for (int i = 0; i < messages; ++i) {
                        std::string msg(size, char('a' + i % 26));
                        msg[0] = char(i);
                        uint64_t copies = net::stream_copies().copies;
                        co_await out.write(msg);
                        co_await out.flush();
                        std::string got = co_await read_n(in, size);
                        copies = net::stream_copies().copies - copies;
                        worst = std::max(worst, copies);
                        total += copies;
                        EXPECT_EQ(got, msg) << "size " << size << " message " << i;
                    }
                    const auto& after = c.stats();
                    std::printf(
                        "%zu B: %lu copies for %d messages; sends: %lu inline, %lu zero-copy, %lu copied\n",
                        size, total, messages, after.inline_sends - before.inline_sends,
                        after.zero_copy_sends - before.zero_copy_sends,
                        after.copied_sends - before.copied_sends);
                    EXPECT_LE(worst, 1u) << size << " B: a message was copied more than once";
                    EXPECT_EQ(total, uint64_t(messages)) << size << " B: the one copy is the gathering one";
                    EXPECT_EQ(after.messages_sent - before.messages_sent, uint64_t(messages));
                    EXPECT_EQ(after.copied_sends, before.copied_sends)
                        << size << " B: copied into the pool again";
                }
                EXPECT_EQ(rdma::registration_count(), regs) << "ibv_reg_mr on the data path";
                co_await out.close();
            },
            stream_echo);
    });
    EXPECT_EQ(rc, 0);
}

TEST(zero_copy, a_header_and_a_payload_leave_in_one_send) {
    int rc = run_rdma(2, []() -> future<> {
        co_await with_pair(
            {},
            [](rdma::connection c) -> future<> {
                net::connected_socket s = c.socket();
                net::input_stream in = s.input();
                net::output_stream out = s.output();
                constexpr int messages = 50;
                constexpr size_t payload_size = 3000;
                net::temporary_buffer payload = pool_pattern(payload_size, 5);
                const auto before = c.stats();
                const uint64_t copies_before = net::stream_copies().copies;
                for (int i = 0; i < messages; ++i) {
                    // The header is gathered (one 16-byte copy into the pool), the payload is
                    // the caller's registered buffer: both in one SEND of two entries.
                    std::string header = "header:" + std::to_string(10000000 + i) + ";";
                    co_await out.write(header);
                    std::array<net::temporary_buffer, 1> parts{payload.share()};
                    co_await out.write(std::span<net::temporary_buffer>(parts));
                    co_await out.flush();
                    std::string got = co_await read_n(in, header.size() + payload_size);
                    EXPECT_EQ(got, header + std::string(payload.view()));
                }
                const auto& after = c.stats();
                EXPECT_EQ(after.messages_sent - before.messages_sent, uint64_t(messages)) << "one SEND each";
                EXPECT_EQ(after.gathered_sends - before.gathered_sends, uint64_t(messages));
                EXPECT_EQ(after.copied_sends, before.copied_sends);
                EXPECT_EQ(net::stream_copies().copies - copies_before, uint64_t(messages))
                    << "the headers only";
                co_await out.close();
            },
            [](rdma::connection c) -> future<> {
                // Each SEND arrives as one receive buffer: the echo shows the boundaries kept.
                net::connected_socket s = c.socket();
                net::input_stream in = s.input();
                net::output_stream out = s.output();
                for (;;) {
                    net::temporary_buffer b = co_await in.read();
                    if (b.empty()) {
                        break;
                    }
                    EXPECT_EQ(b.size(), 16u + 3000u) << "header and payload did not arrive as one message";
                    co_await out.write(std::move(b));
                    co_await out.flush();
                }
                co_await out.close();
            });
    });
    EXPECT_EQ(rc, 0);
}

namespace {

/// Echoes every message back as it is received, until the peer ends.
future<unsigned> message_echo(net::message_connection m) {
    unsigned n = 0;
    for (;;) {
        std::optional<net::temporary_buffer> b = co_await m.receive();
        if (!b) {
            break;
        }
        ++n;
        co_await m.send(std::move(*b));
    }
    co_await m.close();
    co_return n;
}

} // namespace

TEST(messages, boundaries_sizes_parts_and_limits) {
    int rc = run_rdma(2, []() -> future<> {
        unsigned echoed = 0;
        unsigned sent = 0;
        co_await with_pair(
            {},
            [&sent](rdma::connection c) -> future<> {
                net::message_connection m = c.messages();
                EXPECT_THROW(c.socket(), std::logic_error);
                const size_t max = m.max_message_size();
                EXPECT_EQ(max, size_t(16) << 10) << "the peer's receive size";
                // Sizes across the inline size up to the largest, 1 to 6 parts (more parts
                // than entries are joined), heap and pool memory mixed; each arrives whole.
                const size_t sizes[] = {1, 2, 100, 511, 512, 513, 4096, 9000, max - 1, max};
                unsigned seed = 1;
                for (size_t size : sizes) {
                    for (unsigned nparts = 1; nparts <= 6; ++nparts) {
                        if (nparts > size) {
                            continue;
                        }
                        std::string whole(size, '\0');
                        fill_pattern(whole.data(), size, seed);
                        std::vector<net::temporary_buffer> parts;
                        size_t off = 0;
                        for (unsigned p = 0; p < nparts; ++p) {
                            size_t len = p + 1 == nparts ? size - off : size / nparts;
                            std::string_view piece(whole.data() + off, len);
                            if (p % 2) {
                                net::temporary_buffer b = pool_pattern(len, 0);
                                std::memcpy(b.get_write(), piece.data(), len);
                                parts.push_back(std::move(b));
                            } else {
                                parts.push_back(net::temporary_buffer::copy_of(piece));
                            }
                            off += len;
                        }
                        co_await m.send(std::span<net::temporary_buffer>(parts));
                        ++sent;
                        std::optional<net::temporary_buffer> back = co_await m.receive();
                        RDMA_CHECK(back);
                        EXPECT_EQ(back->size(), size) << size << " B in " << nparts << " parts";
                        EXPECT_EQ(back->view(), whole) << size << " B in " << nparts << " parts";
                        ++seed;
                    }
                }
                // Pipelined: 200 messages of different sizes in flight, each received alone.
                std::vector<future<>> sends;
                for (unsigned i = 0; i < 200; ++i) {
                    std::string body(1 + i * 37 % 3000, char('A' + i % 26));
                    sends.push_back(m.send(net::temporary_buffer::copy_of(body)));
                }
                co_await when_all_succeed(std::move(sends));
                for (unsigned i = 0; i < 200; ++i) {
                    std::optional<net::temporary_buffer> back = co_await m.receive();
                    RDMA_CHECK(back);
                    EXPECT_EQ(back->view(), std::string(1 + i * 37 % 3000, char('A' + i % 26)))
                        << "message " << i;
                }
                // Too large or empty: refused at once, nothing sent, the connection goes on.
                EXPECT_THROW(co_await m.send(net::temporary_buffer(max + 1)), std::invalid_argument);
                EXPECT_THROW(co_await m.send(net::temporary_buffer()), std::invalid_argument);
                co_await m.send(net::temporary_buffer::copy_of("after"));
                std::optional<net::temporary_buffer> after = co_await m.receive();
                RDMA_CHECK(after);
                EXPECT_EQ(after->view(), "after");
                EXPECT_TRUE(c.usable());
                co_await m.close();
                std::optional<net::temporary_buffer> end = co_await m.receive();
                EXPECT_FALSE(end) << "no end after the peer closed";
            },
            [&echoed](rdma::connection c) -> future<> { echoed = co_await message_echo(c.messages()); });
        EXPECT_EQ(sent, 10u * 6u - 5u - 4u); // size 1 in one part, size 2 in one or two
        EXPECT_EQ(echoed, sent + 200u + 1u);
    });
    EXPECT_EQ(rc, 0);
}

/// Takes messages with `receive_into`, re-arming from inside each call as rpc/'s link does.
struct collector final : net::message_receiver {
    explicit collector(net::message_connection& m)
        : msgs(m) {}
    net::message_connection& msgs;
    std::vector<std::string> got;
    size_t want = 0; // arm again from on_message until this many arrived
    bool ended = false;
    std::exception_ptr error;
    bool in_call = false; // receive_into runs: a message handed over at once is counted there
    unsigned handed_at_once = 0;
    std::optional<promise<>> done;

    /// Asks for the next message; true when it was handed over before this returned.
    bool arm() {
        in_call = true;
        const bool now = msgs.receive_into(*this);
        in_call = false;
        handed_at_once += now;
        return now;
    }
    void finish() {
        if (done) {
            std::exchange(done, std::nullopt)->set_value();
        }
    }
    void on_message(std::optional<net::temporary_buffer> m) noexcept override {
        if (!m) {
            ended = true;
            finish();
            return;
        }
        got.emplace_back(m->view());
        if (got.size() >= want) {
            finish();
        } else if (!in_call) {
            (void)arm(); // from the receive completion: the next one comes the same way
        }
    }
    void on_receive_error(std::exception_ptr ex) noexcept override {
        error = ex;
        finish();
    }
};

/// Messages a peer may send before the other side reads any (its idle receive window).
constexpr unsigned queued = 2;

/// `receive_into`: a message already queued is handed over before it returns; a receiver that
/// waits is called from the receive completion with each message, in order and intact; the
/// peer's close arrives as nullopt and an abort as `on_receive_error`.
TEST(messages, receive_into_hands_messages_over_without_a_future) {
    auto body = [](unsigned i) { return std::string(1 + i * 53 % 2000, char('a' + i % 26)); };
    int rc = run_rdma(2, [&body]() -> future<> {
        co_await with_pair(
            {},
            [&body](rdma::connection c) -> future<> {
                net::message_connection m = c.messages();
                // Two fit the receive window a peer has before it reads anything.
                for (unsigned i = 0; i < queued; ++i) {
                    co_await m.send(net::temporary_buffer::copy_of(body(i)));
                }
                // The peer took them while they were queued; it now waits for more.
                std::optional<net::temporary_buffer> go = co_await m.receive();
                RDMA_CHECK(go && go->view() == "go");
                for (unsigned i = queued; i < 80; ++i) {
                    co_await m.send(net::temporary_buffer::copy_of(body(i)));
                }
                co_await m.close();
                std::optional<net::temporary_buffer> end = co_await m.receive();
                EXPECT_FALSE(end);
            },
            [&body](rdma::connection c) -> future<> {
                net::message_connection m = c.messages();
                collector r(m);
                RDMA_CHECK(co_await eventually([&] { return c.stats().messages_received >= queued; }));
                // Queued: each is handed over at once.
                r.want = queued;
                for (unsigned i = 0; i < queued; ++i) {
                    EXPECT_TRUE(r.arm()) << "message " << i << " was queued";
                }
                EXPECT_EQ(r.handed_at_once, queued);
                // Nothing queued: the receiver waits, and the completions call it.
                r.want = 80;
                r.done.emplace();
                auto all = r.done->get_future();
                EXPECT_FALSE(r.arm()) << "nothing was queued";
                co_await m.send(net::temporary_buffer::copy_of("go"));
                co_await with_timeout(steady_clock_type::now() + patience, std::move(all));
                RDMA_CHECK(r.got.size() == 80u);
                for (unsigned i = 0; i < 80; ++i) {
                    EXPECT_EQ(r.got[i], body(i)) << "message " << i;
                }
                // The peer's close.
                r.done.emplace();
                auto end = r.done->get_future();
                (void)r.arm();
                co_await with_timeout(steady_clock_type::now() + patience, std::move(end));
                EXPECT_TRUE(r.ended);
                EXPECT_FALSE(r.error);
                co_await m.close();
            });
        // An abort fails a receiver that waits.
        co_await with_pair(
            {},
            [](rdma::connection c) -> future<> {
                net::message_connection m = c.messages();
                try {
                    (void)co_await m.receive();
                } catch (...) {
                }
            },
            [](rdma::connection c) -> future<> {
                net::message_connection m = c.messages();
                collector r(m);
                r.want = 1;
                r.done.emplace();
                auto failed = r.done->get_future();
                EXPECT_FALSE(r.arm());
                m.abort();
                co_await with_timeout(steady_clock_type::now() + patience, std::move(failed));
                EXPECT_TRUE(r.error) << "no error after the abort";
                EXPECT_TRUE(r.got.empty());
            });
    });
    EXPECT_EQ(rc, 0);
}

TEST(messages, a_heap_header_and_a_registered_payload_cost_one_small_copy_and_one_send) {
    int rc = run_rdma(2, []() -> future<> {
        co_await with_pair(
            {},
            [](rdma::connection c) -> future<> {
                net::message_connection m = c.messages();
                net::temporary_buffer payload = pool_pattern(8000, 7);
                const auto before = c.stats();
                uint64_t copied_bytes = net::stream_copies().bytes;
                constexpr int messages = 50;
                for (int i = 0; i < messages; ++i) {
                    std::string header = "hdr" + std::to_string(1000 + i);
                    co_await m.send(net::temporary_buffer::copy_of(header), payload.share());
                    std::optional<net::temporary_buffer> back = co_await m.receive();
                    RDMA_CHECK(back);
                    EXPECT_EQ(back->view(), header + std::string(payload.view()));
                }
                const auto& after = c.stats();
                EXPECT_EQ(after.messages_sent - before.messages_sent, uint64_t(messages));
                EXPECT_EQ(after.gathered_sends - before.gathered_sends, uint64_t(messages));
                // Only the 7-byte headers were copied (into the pool), never the payload.
                EXPECT_EQ(net::stream_copies().bytes - copied_bytes, uint64_t(messages) * 7u);
                co_await m.close();
            },
            [](rdma::connection c) -> future<> { (void)co_await message_echo(c.messages()); });
    });
    EXPECT_EQ(rc, 0);
}

TEST(immediates, two_tagged_users_and_messages_share_one_connection) {
    constexpr auto rw = rdma::access::remote_read | rdma::access::remote_write;
    int rc = run_rdma(2, []() -> future<> {
        auto& ctx = rdma::shard_context::local();
        constexpr size_t slot = 64;
        constexpr unsigned count = 300;
        rdma::buffer mem = ctx.pool().allocate(2 * count * slot);
        std::memset(mem.data(), 0, 2 * count * slot);
        rdma::exported_region exported = rdma::export_region(mem, rw);
        rdma::listen_options lo;
        lo.connection = ctx.opts().connection;
        lo.connection->region = exported.descriptor();
        co_await with_pair(
            lo,
            [](rdma::connection c) -> future<> {
                RDMA_CHECK(c.peer_region());
                const rdma::remote_region rr = *c.peer_region();
                rdma::immediate_channel commits = c.immediates(1);
                rdma::immediate_channel other = c.immediates(2);
                EXPECT_THROW(c.immediates(2), std::logic_error);
                EXPECT_THROW(c.immediates(16), std::invalid_argument);
                EXPECT_THROW(co_await commits.write_with_imm({}, rr, 0, 1u << 28), std::invalid_argument);
                net::message_connection m = c.messages();
                rdma::buffer src = rdma::shard_context::local().pool().allocate(2 * count * slot);
                // Both users write records and ring their own doorbells, interleaved, while
                // request/reply messages go over the same connection.
                auto user = [&](rdma::immediate_channel& ch, unsigned base) -> future<> {
                    for (unsigned i = 0; i < count; ++i) {
                        size_t off = (base + i) * slot;
                        fill_pattern(src.data() + off, slot, base + i);
                        co_await ch.write_with_imm(rdma::span_of(src, off, slot), rr, off, base + i);
                    }
                };
                auto rpc = [&]() -> future<> {
                    for (unsigned i = 0; i < 100; ++i) {
                        co_await m.send(net::temporary_buffer::copy_of("request " + std::to_string(i)));
                        std::optional<net::temporary_buffer> r = co_await m.receive();
                        RDMA_CHECK(r);
                        EXPECT_EQ(r->view(), "reply " + std::to_string(i));
                    }
                };
                auto a = user(commits, 0);
                auto b = user(other, count);
                auto r = rpc();
                co_await std::move(a);
                co_await std::move(b);
                co_await std::move(r);
                EXPECT_THROW(co_await c.next_immediate(), std::logic_error);
                co_await m.close();
            },
            [&mem](rdma::connection c) -> future<> {
                // The second channel is opened only after traffic started: its values wait.
                rdma::immediate_channel commits = c.immediates(1);
                net::message_connection m = c.messages();
                auto serve = [&]() -> future<> {
                    for (unsigned i = 0;; ++i) {
                        std::optional<net::temporary_buffer> q = co_await m.receive();
                        if (!q) {
                            break;
                        }
                        EXPECT_EQ(q->view(), "request " + std::to_string(i));
                        co_await m.send(net::temporary_buffer::copy_of("reply " + std::to_string(i)));
                    }
                    co_await m.close();
                };
                auto read_channel = [&](rdma::immediate_channel& ch, unsigned base) -> future<> {
                    for (unsigned i = 0; i < count; ++i) {
                        uint32_t v = co_await ch.next();
                        EXPECT_EQ(v, base + i) << "channel " << ch.tag() << ": out of order or misrouted";
                        // The record written before the doorbell is visible.
                        EXPECT_EQ(check_pattern(mem.data() + size_t(v) * slot, slot, v), SIZE_MAX);
                    }
                };
                auto served = serve();
                auto first = read_channel(commits, 0);
                co_await sleep(20ms);
                rdma::immediate_channel other = c.immediates(2);
                auto second = read_channel(other, count);
                co_await std::move(first);
                co_await std::move(second);
                co_await std::move(served);
                EXPECT_EQ(c.stats().immediates_received, 2u * count);
            });
    });
    EXPECT_EQ(rc, 0);
}
