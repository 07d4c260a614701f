// The --targets list of the benchmark apps (shoal-echo bench, shoal-kv-bench): names, addresses
// and process ids, and an error that names the item for each way an item can be wrong.
#include "apps/common/bench_target.hh"

#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

using shoal::apps::parse_targets;

TEST(bench_targets, names_addresses_and_pids) {
    auto t = parse_targets("shoal=127.0.0.1:11211@42,memcached=127.0.0.1:11311,,epoll=[::1]:7");
    ASSERT_EQ(t.size(), 3u);
    EXPECT_EQ(t[0].name, "shoal");
    EXPECT_EQ(t[0].address.to_string(), "127.0.0.1:11211");
    EXPECT_EQ(t[0].pid, 42);
    EXPECT_EQ(t[1].name, "memcached");
    EXPECT_EQ(t[1].address.to_string(), "127.0.0.1:11311");
    EXPECT_EQ(t[1].pid, 0);
    EXPECT_EQ(t[2].name, "epoll");
    EXPECT_EQ(t[2].address.port(), 7);
    EXPECT_TRUE(parse_targets("").empty());
}

TEST(bench_targets, a_wrong_item_is_named_in_the_error) {
    const char* bad[] = {
        "127.0.0.1:11211",              // no name
        "=127.0.0.1:11211",             // empty name
        "shoal=127.0.0.1:11211@",       // empty pid
        "shoal=127.0.0.1:11211@12x",    // pid with junk
        "shoal=127.0.0.1:11211@-3",     // negative pid
        "shoal=no-such-address:port:x", // address parse refuses
    };
    for (const char* item : bad) {
        try {
            parse_targets(std::string("ok=127.0.0.1:1,") + item);
            ADD_FAILURE() << "accepted " << item;
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find(item), std::string::npos) << e.what();
        }
    }
}
