/* What the C ABI tests (tests/capi/<handle>_test.c, one program per handle) share: the check macros and
 * their counts, step timing, the runtime options of a test run with or without RDMA, and waiting
 * for the callbacks of _async calls. */

#pragma once

#include "shoal/shoal_c.h"

#include <pthread.h>
#include <stdio.h>

/** Checks that passed and failed so far (main returns capi_test_end()'s verdict). */
extern int passed, failed;

#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        if (cond) {                                                                                          \
            ++passed;                                                                                        \
        } else {                                                                                             \
            ++failed;                                                                                        \
            fprintf(stderr, "%s:%d: FAILED %s (last error: %s)\n", __FILE__, __LINE__, #cond,                \
                    shoal_last_error());                                                                     \
        }                                                                                                    \
    } while (0)

#define CHECK_RC(call, expected) CHECK((call) == (expected))

/* Request and connection timeouts of the handles under test: generous, since the tests assert
 * outcomes and the sanitizer build runs them in an emulated guest on a busy host (500 requests
 * in flight there can take longer than a few seconds). Tests of a timeout set their own. */
enum { generous_ms = 120000, generous_s = generous_ms / 1000 };

/** Set by capi_test_begin: runtimes start RDMA (and KV servers are rdma:// ones). */
extern int use_rdma;

/** Starts a test program: RDMA on when SHOAL_C_TEST_RDMA is set (with_kv_servers.sh --rdma sets
 *  it) or the first argument is `--rdma` (the RDMA tests that need no KV server). */
void capi_test_begin(int argc, char** argv);

/** Prints the counts and returns main's exit status (1 when a check failed). */
int capi_test_end(void);

/** Prints how long the step named `what` took since the previous call (guest runs are slow:
 *  this tells where the time goes). */
void lap(const char* what);

/** Options for a runtime of `shards` shards, with RDMA when the test runs on a device. */
shoal_runtime_options options(unsigned shards);

/** Starts a runtime of `shards` shards (options()) as a check; NULL, having said why, when it
 *  did not start. */
shoal_runtime* start_runtime(unsigned shards);

/** The environment variable `name`; when it is not set, says so (with `lost`, what goes
 *  untested) and counts a failure. */
const char* required_env(const char* name, const char* lost);

/** Callback forms: completions counted under a mutex, waited for with a condition variable. */
struct waiter {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int done, ok, on_shard_thread, blocking_refused;
    shoal_kv* kv;
};

#define WAITER_INIT                                                                                          \
    { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, NULL }

/** Counts a completion (`ok` if it was right) and whether it ran on a shoal-shard-N thread. */
void note_done(struct waiter* w, int ok);

/** Waits up to generous_s for `count` completions; 1 when they all came. */
int wait_for(struct waiter* w, int count);

/** A shoal_done_cb counting a completion on the waiter `user`: right when SHOAL_OK without an
 *  error text. */
void on_set_done(void* user, int status, const char* error);
