// What a GET of a cached location costs the client per GET, in the Soft-RoCE guest:
// heap allocations (this binary replaces the global operator new to count them on the shard's
// thread) and reactor tasks, over many cached GETs of a 32-byte value, one at a time. A cached
// GET needs one allocation (the value's std::string; none into the caller's buffer) and one
// task: the READ's completion validates the record and resolves the GET from the CQ poll, and
// the caller resumes in the one task (docs/kv.md). A control-path GET (gat, answered by the
// server) is measured beside them for bench/instructions_per_op.sh.
#include "rdma_kv_util.hh"

#include "../softroce/callgrind_marks.hh"
#include "core/small_pool.hh"

#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

// The replacements below pair malloc/free; GCC cannot see that and warns at every inlined
// new/delete pair of this file.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
thread_local bool tl_counting = false;
thread_local long tl_mallocs = 0;
} // namespace

// Every unaligned form is replaced, so that each pairs with its own kind: a sanitizer runtime
// replaces the forms left out here, and a nothrow `new` of its own freed by `free` below would
// be a mismatch. The aligned forms stay the runtime's (nothing on the GET path uses them).
void* operator new(std::size_t n) {
    tl_mallocs += tl_counting;
    if (void* p = std::malloc(n ? n : 1)) {
        return p;
    }
    throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    tl_mallocs += tl_counting;
    return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n) {
    return operator new(n);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept {
    return operator new(n, t);
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
    std::free(p);
}
void operator delete[](void* p) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
    std::free(p);
}

using namespace shoal;
using namespace shoal::rdma_test;
using namespace shoal::kv_test;

namespace {

/// Per-GET costs of `n` GETs made by `get` (a callable returning the GET's future); under
/// callgrind the GETs are a dump named `mark` (bench/instructions_per_op.sh).
struct per_get {
    double mallocs = 0;
    double tasks = 0;
};

/// The keys the GETs cycle through: as many as shoal-kv-bench's cached GET cells use, formatted
/// as its keys are (12 bytes, no heap string), so that the location lookup hashes as there.
constexpr unsigned key_count = 100;
std::string key_number(unsigned i) {
    char k[16];
    std::snprintf(k, sizeof(k), "key:%08u", i % key_count);
    return k;
}

template <typename Get>
future<per_get> measure(unsigned n, const char* mark, Get get) {
    for (unsigned i = 0; i < 2 * key_count; ++i) { // warm: every location cached, pools and free lists filled
        RDMA_CHECK(co_await get());
    }
    const uint64_t tasks_before = local_reactor().stats().tasks_run;
    tl_mallocs = 0;
    tl_counting = true;
    bool all_found = true;
    SHOAL_CALLGRIND_ZERO();
    for (unsigned i = 0; i < n; ++i) {
        all_found = all_found && bool(co_await get());
    }
    SHOAL_CALLGRIND_DUMP(mark);
    tl_counting = false;
    RDMA_CHECK(all_found);
    co_return per_get{double(tl_mallocs) / n, double(local_reactor().stats().tasks_run - tasks_before) / n};
}

} // namespace

TEST(kv_get_cost, a_cached_get_allocates_its_value_alone_and_runs_one_task) {
    reactor_config no_time_quota; // no preemption round trips counted as the GETs' tasks
    no_time_quota.task_quota_time = std::chrono::microseconds(0);
    int rc = run_rdma(
        1,
        []() -> future<> {
            co_await with_kv([](rdma_kv& kvs) -> future<> {
                kv::internal::rdma_transport& t = kvs.transport();
                kv::client& c = kvs.client(kv::endpoint_transport::rdma);
                std::vector<std::string> keys;
                for (unsigned i = 0; i < key_count; ++i) {
                    keys.push_back(key_number(i));
                    RDMA_CHECK(co_await c.set(keys.back(), value_of(keys.back(), 1, 32), 0, 0) ==
                               kv::store_outcome::stored);
                }
                unsigned next = 0; // the GETs take the keys in turn
                auto key = [&]() -> const std::string& { return keys[next++ % key_count]; };
                constexpr unsigned n = 300;
                const uint64_t reads_before = t.stats().direct_reads;
                per_get one = co_await measure(n, "kv cached GET rdma_transport::get_one 32 B/300",
                                               [&] { return t.get_one(key()); });
                EXPECT_GE(t.stats().direct_reads - reads_before, n) << "not every GET was a cached READ";
                rdma::buffer dst =
                    rdma::shard_context::local().pool().allocate(kv::get_into_capacity(keys[0].size(), 32));
                per_get into = co_await measure(n, "kv cached GET rdma_transport::get_into 32 B/300", [&] {
                    return t.get_into(key(), rdma::span_of(dst, 0, dst.capacity()));
                });
                EXPECT_GE(t.stats().zero_copy_gets, n);
                per_get client = co_await measure(n, "kv cached GET kv::client::get 32 B/300",
                                                  [&] { return c.get(key()); });
                // The control path, for bench/instructions_per_op.sh (its cost is not bounded
                // here): a gat never READs a cached location; the server (rdma_server::handle)
                // answers it with the value inline, and read_value takes it.
                per_get control = co_await measure(n, "kv control GET rdma_transport::gat 32 B/300",
                                                   [&] { return t.gat(key(), 0); });
                std::printf("per control GET (gat): %.2f mallocs %.2f tasks\n", control.mallocs,
                            control.tasks);
                std::printf("per cached GET: get_one %.2f mallocs %.2f tasks, get_into %.2f / %.2f, "
                            "kv::client::get %.2f / %.2f\n",
                            one.mallocs, one.tasks, into.mallocs, into.tasks, client.mallocs, client.tasks);
                // get_one: the value's std::string; get_into: nothing; kv::client::get: as get_one.
                // Plus the GET's in-flight state where the small-object pool is off
                // (AddressSanitizer builds take it from operator new).
                constexpr double pooled = internal::small_pool::enabled ? 0 : 1;
                EXPECT_LE(one.mallocs, 1.05 + pooled);
                EXPECT_LE(into.mallocs, 0.05 + pooled);
                EXPECT_LE(client.mallocs, 1.05 + pooled);
                // The READ's completion resolves the GET; the caller's resumption is the one task.
                EXPECT_LE(one.tasks, 1.05);
                EXPECT_LE(into.tasks, 1.05);
                EXPECT_LE(client.tasks, 1.05);
            });
        },
        test_options(), no_time_quota);
    EXPECT_EQ(rc, 0);
}
