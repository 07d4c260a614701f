/* The C ABI from a C program: the runtime, error codes and texts, the KV client against two
 * running shoal-kv servers (SHOAL_KV_SERVERS, set by with_kv_servers.sh), blocking and callback
 * forms, several caller threads, a server that is not there, calls after close and stop. */

#define _GNU_SOURCE
#include "shoal/shoal_c.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int passed, failed;

/* Prints how long the step named `what` took since the previous call (guest runs are slow:
 * this tells where the time goes). */
static void lap(const char* what) {
    static struct timespec last;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (last.tv_sec) {
        fprintf(stderr, "  %-28s %6.2f s\n", what,
                (double)(now.tv_sec - last.tv_sec) + (double)(now.tv_nsec - last.tv_nsec) / 1e9);
    }
    last = now;
}

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

static const char* servers;
static const char* dead_server;
static int use_rdma; /* SHOAL_C_TEST_RDMA: runtimes start RDMA, the servers are rdma:// ones */

/* Options for a runtime of `shards` shards, with RDMA when the test runs on a device. */
static shoal_runtime_options options(unsigned shards) {
    shoal_runtime_options opts;
    shoal_runtime_options_init(&opts);
    opts.shards = shards;
    opts.rdma = use_rdma;
    return opts;
}

/* Without a device, asking for RDMA is a clear error and leaves nothing running. */
static void test_rdma_without_a_device(void) {
    shoal_runtime_options opts = options(1);
    opts.rdma = 1;
    shoal_runtime* rt = NULL;
    int rc = shoal_runtime_start(&opts, &rt);
    if (rc == SHOAL_OK) { /* this machine has a device after all */
        shoal_runtime_destroy(rt);
        return;
    }
    CHECK(rc == SHOAL_EUNAVAILABLE && rt == NULL);
    CHECK(strlen(shoal_last_error()) > 0);
    CHECK_RC(shoal_runtime_start(NULL, &rt), SHOAL_OK); /* and a plain runtime starts after it */
    shoal_runtime_destroy(rt);
}

static void test_status_names_and_version(void) {
    CHECK(strcmp(shoal_status_name(SHOAL_ENOTFOUND), "SHOAL_ENOTFOUND") == 0);
    CHECK(strcmp(shoal_status_name(-5), "SHOAL_UNKNOWN") == 0);
    CHECK(shoal_version() / 10000 == SHOAL_C_VERSION_MAJOR);
}

static void test_bad_runtime_use(void) {
    shoal_runtime* rt = (shoal_runtime*)1;
    shoal_runtime_options opts;
    shoal_runtime_options_init(&opts);
    opts.shards = 0;
    CHECK_RC(shoal_runtime_start(&opts, &rt), SHOAL_EINVAL);
    CHECK(rt == NULL);
    CHECK(strstr(shoal_last_error(), "shards") != NULL);
    opts.shards = 1;
    opts.struct_size = 3;
    CHECK_RC(shoal_runtime_start(&opts, &rt), SHOAL_EINVAL);
    CHECK_RC(shoal_runtime_start(NULL, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_runtime_stop(NULL), SHOAL_EINVAL);
    CHECK(shoal_runtime_shards(NULL) == 0);
    shoal_runtime_destroy(NULL);
    shoal_kv_destroy(NULL);
    CHECK_RC(shoal_kv_set(NULL, "k", 1, "v", 1, 0, 0), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_close(NULL), SHOAL_EINVAL);
}

static void test_round_trips(shoal_kv* kv) {
    /* Binary bytes, a zero among them, and flags. */
    const char value[] = {'a', 0, 'b', (char)0xff, 'c'};
    CHECK_RC(shoal_kv_set(kv, "c-binary", 8, value, sizeof value, 0xdeadbeef, 0), SHOAL_OK);
    char out[16];
    size_t size = 0;
    uint32_t flags = 0;
    CHECK_RC(shoal_kv_get(kv, "c-binary", 8, out, sizeof out, &size, &flags), SHOAL_OK);
    CHECK(size == sizeof value && memcmp(out, value, size) == 0 && flags == 0xdeadbeef);
    /* Too small: nothing copied, the size needed returned. */
    size = 0;
    CHECK_RC(shoal_kv_get(kv, "c-binary", 8, out, 2, &size, NULL), SHOAL_ETOOSMALL);
    CHECK(size == sizeof value);
    void* copy = NULL;
    CHECK_RC(shoal_kv_get_copy(kv, "c-binary", 8, &copy, &size, &flags), SHOAL_OK);
    CHECK(copy != NULL && size == sizeof value && memcmp(copy, value, size) == 0);
    shoal_free(copy);
    /* Empty value. */
    CHECK_RC(shoal_kv_set(kv, "c-empty", 7, NULL, 0, 0, 0), SHOAL_OK);
    CHECK_RC(shoal_kv_get(kv, "c-empty", 7, NULL, 0, &size, NULL), SHOAL_OK);
    CHECK(size == 0);
    /* add, delete, missing keys. */
    CHECK_RC(shoal_kv_add(kv, "c-binary", 8, "x", 1, 0, 0), SHOAL_ENOTSTORED);
    CHECK_RC(shoal_kv_delete(kv, "c-binary", 8), SHOAL_OK);
    CHECK_RC(shoal_kv_delete(kv, "c-binary", 8), SHOAL_ENOTFOUND);
    CHECK_RC(shoal_kv_get(kv, "c-binary", 8, out, sizeof out, &size, NULL), SHOAL_ENOTFOUND);
    CHECK(strstr(shoal_last_error(), "no such key") != NULL);
    CHECK_RC(shoal_kv_add(kv, "c-binary", 8, "x", 1, 0, 0), SHOAL_OK);
    /* Bad keys are refused before anything is sent. */
    CHECK_RC(shoal_kv_set(kv, "with space", 10, "x", 1, 0, 0), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_set(kv, "", 0, "x", 1, 0, 0), SHOAL_EINVAL);
    char long_key[300];
    memset(long_key, 'k', sizeof long_key);
    CHECK_RC(shoal_kv_set(kv, long_key, sizeof long_key, "x", 1, 0, 0), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_get(kv, NULL, 3, out, sizeof out, &size, NULL), SHOAL_EINVAL);
    /* The registered-buffer calls refuse a missing buffer or out-parameter before anything is
     * sent (their use is in test_kv_buffers, on a device). */
    size_t at = 0;
    CHECK_RC(shoal_kv_set_buffer(kv, "k", 1, NULL, 0, 1, 0, 0), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_get_buffer(kv, "k", 1, NULL, 0, 64, &at, &size, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_set_buffer_async(kv, "k", 1, NULL, 0, 1, 0, 0, NULL, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_get_buffer_async(kv, "k", 1, NULL, 0, 64, NULL, NULL), SHOAL_EINVAL);
    CHECK(shoal_kv_buffer_capacity(3, 1000) == 56 + 1008 + 16);
}

/* replace, append, prepend, cas with the unique from gets, and gat (minor 8). */
static void test_conditional_stores(shoal_kv* kv) {
    char out[64];
    size_t size = 0;
    uint32_t flags = 0;
    uint64_t unique = 0, again = 0;
    shoal_kv_delete(kv, "c-cond", 6);
    CHECK_RC(shoal_kv_replace(kv, "c-cond", 6, "x", 1, 0, 0), SHOAL_ENOTSTORED);
    CHECK_RC(shoal_kv_append(kv, "c-cond", 6, "x", 1), SHOAL_ENOTSTORED);
    CHECK_RC(shoal_kv_prepend(kv, "c-cond", 6, "x", 1), SHOAL_ENOTSTORED);
    CHECK_RC(shoal_kv_get(kv, "c-cond", 6, out, sizeof out, &size, NULL), SHOAL_ENOTFOUND);
    CHECK_RC(shoal_kv_set(kv, "c-cond", 6, "mid", 3, 7, 0), SHOAL_OK);
    CHECK_RC(shoal_kv_replace(kv, "c-cond", 6, "MID", 3, 9, 0), SHOAL_OK);
    /* append and prepend keep the flags of the value they join. */
    CHECK_RC(shoal_kv_append(kv, "c-cond", 6, ">>", 2), SHOAL_OK);
    CHECK_RC(shoal_kv_prepend(kv, "c-cond", 6, "<<", 2), SHOAL_OK);
    CHECK_RC(shoal_kv_gets(kv, "c-cond", 6, out, sizeof out, &size, &flags, &unique), SHOAL_OK);
    CHECK(size == 7 && memcmp(out, "<<MID>>", 7) == 0 && flags == 9 && unique != 0);
    /* gets reports the unique with a buffer too small as well; the same version, the same unique. */
    CHECK_RC(shoal_kv_gets(kv, "c-cond", 6, out, 1, &size, NULL, &again), SHOAL_ETOOSMALL);
    CHECK(size == 7 && again == unique);
    /* cas: stored with the current unique; refused with it once the value moved on. */
    CHECK_RC(shoal_kv_cas(kv, "c-cond", 6, "one", 3, 1, 0, unique), SHOAL_OK);
    CHECK_RC(shoal_kv_cas(kv, "c-cond", 6, "two", 3, 2, 0, unique), SHOAL_EEXISTS);
    CHECK(strstr(shoal_last_error(), "shoal_kv_cas") != NULL);
    CHECK_RC(shoal_kv_gets(kv, "c-cond", 6, out, sizeof out, &size, &flags, &again), SHOAL_OK);
    CHECK(size == 3 && memcmp(out, "one", 3) == 0 && flags == 1 && again != unique);
    /* gat: the value, its flags and unique, as it gets a new exptime; into the past, once. */
    CHECK_RC(shoal_kv_gat(kv, "c-cond", 6, 3600, out, sizeof out, &size, &flags, &unique), SHOAL_OK);
    CHECK(size == 3 && memcmp(out, "one", 3) == 0 && flags == 1 && unique == again);
    CHECK_RC(shoal_kv_gat(kv, "c-cond", 6, -1, out, sizeof out, &size, NULL, NULL), SHOAL_OK);
    CHECK(size == 3 && memcmp(out, "one", 3) == 0);
    CHECK_RC(shoal_kv_get(kv, "c-cond", 6, out, sizeof out, &size, NULL), SHOAL_ENOTFOUND);
    CHECK_RC(shoal_kv_gat(kv, "c-cond", 6, 3600, out, sizeof out, &size, NULL, NULL), SHOAL_ENOTFOUND);
    CHECK(strstr(shoal_last_error(), "shoal_kv_gat") != NULL);
    CHECK_RC(shoal_kv_set(kv, "c-cond", 6, "one", 3, 1, 0), SHOAL_OK);
    CHECK_RC(shoal_kv_delete(kv, "c-cond", 6), SHOAL_OK);
    CHECK_RC(shoal_kv_cas(kv, "c-cond", 6, "three", 5, 0, 0, again), SHOAL_ENOTFOUND);
    /* A value larger than a request (over RDMA: granted, WRITTEN, joined at the commit). */
    enum { big = 20000 };
    char* tail = malloc(big);
    char* whole = malloc(big + 1);
    CHECK(tail != NULL && whole != NULL);
    if (tail && whole) {
        memset(tail, 't', big);
        CHECK_RC(shoal_kv_set(kv, "c-cond", 6, "h", 1, 0, 0), SHOAL_OK);
        CHECK_RC(shoal_kv_append(kv, "c-cond", 6, tail, big), SHOAL_OK);
        CHECK_RC(shoal_kv_get(kv, "c-cond", 6, whole, big + 1, &size, NULL), SHOAL_OK);
        CHECK(size == big + 1 && whole[0] == 'h' && memcmp(whole + 1, tail, big) == 0);
    }
    free(tail);
    free(whole);
    /* Bad arguments are refused before anything is sent. */
    CHECK_RC(shoal_kv_append(kv, "bad key", 7, "x", 1), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_prepend(kv, "c-cond", 6, NULL, 1), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_cas(NULL, "c-cond", 6, "x", 1, 0, 0, 1), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_gets(kv, "c-cond", 6, NULL, 8, &size, NULL, &unique), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_delete(kv, "c-cond", 6), SHOAL_OK);
}

/* The number after "name " on a line of shoal_kv_stats' text (-1 when there is none). */
static long long stat_of(const char* text, const char* name) {
    size_t n = strlen(name);
    for (const char* line = text; line && *line;) {
        if (strncmp(line, name, n) == 0 && line[n] == ' ') {
            return atoll(line + n + 1);
        }
        const char* end = strchr(line, '\n');
        line = end ? end + 1 : NULL;
    }
    return -1;
}

/* The sum of statistic `name` over both servers (with_kv_servers.sh starts two), -1 on a
 * failure. */
static long long stat_of_both(shoal_kv* kv, const char* name) {
    long long sum = 0;
    for (size_t i = 0; i < 2; ++i) {
        char* text = NULL;
        size_t size = 0;
        if (shoal_kv_stats(kv, i, &text, &size) != SHOAL_OK) {
            return -1;
        }
        long long value = stat_of(text, name);
        shoal_free(text);
        if (value < 0) {
            return -1;
        }
        sum += value;
    }
    return sum;
}

/* shoal_kv_stats (minor 8): each server's statistics as text; a touch counted by its server (a
 * get is not a fit: over RDMA one of a cached location never reaches the server). */
static void test_stats(shoal_kv* kv) {
    char* text = NULL;
    size_t size = 0;
    CHECK_RC(shoal_kv_stats(kv, 0, &text, &size), SHOAL_OK);
    CHECK(text != NULL && size == strlen(text) && strncmp(text, "pid ", 4) == 0);
    long long pid0 = text ? stat_of(text, "pid") : -1;
    CHECK(text != NULL && stat_of(text, "curr_items") >= 0 && stat_of(text, "limit_maxbytes") > 0);
    shoal_free(text);
    CHECK_RC(shoal_kv_stats(kv, 1, &text, &size), SHOAL_OK);
    CHECK(text != NULL && stat_of(text, "pid") > 0 && stat_of(text, "pid") != pid0); /* two processes */
    shoal_free(text);
    CHECK_RC(shoal_kv_set(kv, "c-stat", 6, "v", 1, 0, 0), SHOAL_OK);
    long long before = stat_of_both(kv, "touch_hits");
    CHECK_RC(shoal_kv_touch(kv, "c-stat", 6, 3600), SHOAL_OK);
    CHECK(before >= 0 && stat_of_both(kv, "touch_hits") == before + 1);
    CHECK_RC(shoal_kv_delete(kv, "c-stat", 6), SHOAL_OK);
    text = (char*)1;
    CHECK_RC(shoal_kv_stats(kv, 2, &text, &size), SHOAL_EINVAL);
    CHECK(text == NULL && strstr(shoal_last_error(), "no server 2") != NULL);
    CHECK_RC(shoal_kv_stats(kv, 0, NULL, &size), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_stats(NULL, 0, &text, &size), SHOAL_EINVAL);
}

/* incr/decr, touch and flush_all (last: it empties the servers). */
static void test_counters_touch_flush(shoal_kv* kv) {
    uint64_t n = 0;
    CHECK_RC(shoal_kv_set(kv, "c-count", 7, "10", 2, 0, 0), SHOAL_OK);
    CHECK_RC(shoal_kv_incr(kv, "c-count", 7, 5, &n), SHOAL_OK);
    CHECK(n == 15);
    CHECK_RC(shoal_kv_decr(kv, "c-count", 7, 100, &n), SHOAL_OK);
    CHECK(n == 0); /* decr stops at 0 */
    CHECK_RC(shoal_kv_incr(kv, "c-count", 7, 1, NULL), SHOAL_OK);
    CHECK_RC(shoal_kv_incr(kv, "c-nokey", 7, 1, &n), SHOAL_ENOTFOUND);
    CHECK_RC(shoal_kv_decr(kv, "c-nokey", 7, 1, &n), SHOAL_ENOTFOUND);
    CHECK_RC(shoal_kv_set(kv, "c-text", 6, "abc", 3, 0, 0), SHOAL_OK);
    CHECK_RC(shoal_kv_incr(kv, "c-text", 6, 1, &n), SHOAL_ESERVER);
    CHECK(strstr(shoal_last_error(), "non-numeric") != NULL);
    CHECK_RC(shoal_kv_incr(kv, "bad key", 7, 1, &n), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_incr(NULL, "c-count", 7, 1, &n), SHOAL_EINVAL);
    /* touch: the value stays; into the past, it is gone. */
    char out[8];
    size_t size = 0;
    CHECK_RC(shoal_kv_touch(kv, "c-text", 6, 3600), SHOAL_OK);
    CHECK_RC(shoal_kv_get(kv, "c-text", 6, out, sizeof out, &size, NULL), SHOAL_OK);
    CHECK(size == 3 && memcmp(out, "abc", 3) == 0);
    CHECK_RC(shoal_kv_touch(kv, "c-text", 6, -1), SHOAL_OK);
    CHECK_RC(shoal_kv_get(kv, "c-text", 6, out, sizeof out, &size, NULL), SHOAL_ENOTFOUND);
    CHECK_RC(shoal_kv_touch(kv, "c-text", 6, 0), SHOAL_ENOTFOUND);
    CHECK_RC(shoal_kv_touch(kv, "", 0, 0), SHOAL_EINVAL);
    /* flush_all: delayed, nothing changes yet; at once, every server is empty. */
    CHECK_RC(shoal_kv_flush_all(kv, 100), SHOAL_OK);
    CHECK_RC(shoal_kv_incr(kv, "c-count", 7, 1, &n), SHOAL_OK);
    CHECK(n == 2);
    CHECK_RC(shoal_kv_flush_all(kv, 0), SHOAL_OK);
    CHECK_RC(shoal_kv_get(kv, "c-count", 7, out, sizeof out, &size, NULL), SHOAL_ENOTFOUND);
    CHECK_RC(shoal_kv_get(kv, "c-empty", 7, out, sizeof out, &size, NULL), SHOAL_ENOTFOUND);
    CHECK_RC(shoal_kv_flush_all(NULL, 0), SHOAL_EINVAL);
}

static void test_get_many(shoal_kv* kv) {
    enum { n = 64 };
    char names[n][16];
    const char* keys[n];
    size_t sizes[n];
    shoal_kv_value results[n];
    for (int i = 0; i < n; ++i) {
        snprintf(names[i], sizeof names[i], "many-%d", i);
        keys[i] = names[i];
        sizes[i] = strlen(names[i]);
        if (i % 4 != 3) { /* every fourth key stays missing */
            CHECK_RC(shoal_kv_set(kv, keys[i], sizes[i], names[i], sizes[i], (uint32_t)i, 0), SHOAL_OK);
        } else {
            shoal_kv_delete(kv, keys[i], sizes[i]);
        }
    }
    CHECK_RC(shoal_kv_get_many(kv, n, keys, sizes, results), SHOAL_OK);
    int right = 0;
    for (int i = 0; i < n; ++i) {
        if (i % 4 == 3) {
            right += results[i].status == SHOAL_ENOTFOUND && results[i].data == NULL;
        } else {
            right += results[i].status == SHOAL_OK && results[i].size == sizes[i] &&
                     memcmp(results[i].data, names[i], sizes[i]) == 0 && results[i].flags == (uint32_t)i;
        }
        shoal_free(results[i].data);
    }
    CHECK(right == n);
}

/* Callback forms: completions counted under a mutex, waited for with a condition variable. */
struct waiter {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int done, ok, on_shard_thread, blocking_refused;
    shoal_kv* kv;
};

static void note_done(struct waiter* w, int ok) {
    char name[32] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);
    pthread_mutex_lock(&w->mutex);
    w->done++;
    w->ok += ok;
    w->on_shard_thread += strncmp(name, "shoal-shard-", 12) == 0;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->mutex);
}

static void on_set(void* user, int status, const char* error) {
    (void)error;
    struct waiter* w = user;
    /* A blocking call here would wait for this very thread: it is refused. */
    char out[4];
    size_t size;
    if (shoal_kv_get(w->kv, "async-0", 7, out, sizeof out, &size, NULL) == SHOAL_ESTATE) {
        pthread_mutex_lock(&w->mutex);
        w->blocking_refused++;
        pthread_mutex_unlock(&w->mutex);
    }
    note_done(w, status == SHOAL_OK && error == NULL);
}

static void on_set_done(void* user, int status, const char* error) {
    note_done(user, status == SHOAL_OK && error == NULL);
}

static void on_get(void* user, int status, const void* value, size_t size, uint32_t flags,
                   const char* error) {
    (void)error;
    struct waiter* w = user;
    int ok = status == SHOAL_OK && size == 8 && memcmp(value, "async-v", 7) == 0 && flags == 7;
    note_done(w, ok);
}

static void on_missing(void* user, int status, const void* value, size_t size, uint32_t flags,
                       const char* error) {
    (void)value;
    (void)size;
    (void)flags;
    note_done(user, status == SHOAL_ENOTFOUND && error != NULL);
}

static int wait_for(struct waiter* w, int count) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += generous_s;
    pthread_mutex_lock(&w->mutex);
    while (w->done < count) {
        if (pthread_cond_timedwait(&w->cond, &w->mutex, &deadline) != 0) {
            break;
        }
    }
    int done = w->done;
    pthread_mutex_unlock(&w->mutex);
    return done == count;
}

static void test_async(shoal_kv* kv) {
    enum { n = 500 };
    struct waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, kv};
    for (int i = 0; i < n; ++i) {
        char key[16];
        int len = snprintf(key, sizeof key, "async-%d", i);
        char value[8] = "async-v"; /* 8 bytes with the terminating zero */
        CHECK_RC(shoal_kv_set_async(kv, key, (size_t)len, value, sizeof value, 7, 0, on_set, &w), SHOAL_OK);
    }
    CHECK(wait_for(&w, n));
    CHECK(w.ok == n);
    CHECK(w.on_shard_thread == n);
    CHECK(w.blocking_refused == n);
    w.done = w.ok = w.on_shard_thread = 0;
    for (int i = 0; i < n; ++i) {
        char key[16];
        int len = snprintf(key, sizeof key, "async-%d", i);
        CHECK_RC(shoal_kv_get_async(kv, key, (size_t)len, on_get, &w), SHOAL_OK);
    }
    CHECK_RC(shoal_kv_get_async(kv, "async-none", 10, on_missing, &w), SHOAL_OK);
    CHECK(wait_for(&w, n + 1));
    CHECK(w.ok == n + 1);
    CHECK_RC(shoal_kv_get_async(kv, "bad key", 7, on_missing, &w), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_get_async(kv, "k", 1, NULL, &w), SHOAL_EINVAL);
}

/* One _async call's outcome, waited for: its status, whether an error text came with a failure
 * (and none with success), and a counter or a value. */
struct outcome {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int done, status, error_fits;
    uint64_t count;
    char value[64];
    size_t size;
    uint32_t flags;
};

static void outcome_set(struct outcome* o, int status, const char* error) {
    pthread_mutex_lock(&o->mutex);
    o->status = status;
    o->error_fits = (status == SHOAL_OK) == (error == NULL);
    o->done = 1;
    pthread_cond_signal(&o->cond);
    pthread_mutex_unlock(&o->mutex);
}

static void on_outcome(void* user, int status, const char* error) {
    outcome_set(user, status, error);
}

static void on_count(void* user, int status, uint64_t value, const char* error) {
    struct outcome* o = user;
    o->count = value; /* read after `done`, under the mutex */
    outcome_set(o, status, error);
}

static void on_value(void* user, int status, const void* value, size_t size, uint32_t flags,
                     const char* error) {
    struct outcome* o = user;
    o->size = size;
    o->flags = flags;
    if (value && size <= sizeof o->value) {
        memcpy(o->value, value, size);
    }
    outcome_set(o, status, error);
}

/* Waits for the call started with `rc` (SHOAL_OK: handed over) and returns its status; -1 when it
 * was not handed over or did not complete in 30 s. Resets `o` for the next call. */
static int await_outcome(struct outcome* o, int rc) {
    if (rc != SHOAL_OK) {
        return -1;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += generous_s;
    pthread_mutex_lock(&o->mutex);
    while (!o->done && pthread_cond_timedwait(&o->cond, &o->mutex, &deadline) == 0) {
    }
    int status = o->done && o->error_fits ? o->status : -1;
    o->done = 0;
    pthread_mutex_unlock(&o->mutex);
    return status;
}

/* The _async forms of the conditional stores, touch, incr/decr and gat (minor 9): the same
 * outcomes as their blocking forms, delivered to the callback. */
static void test_conditional_async(shoal_kv* kv) {
    struct outcome o = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, "", 0, 0};
    char out[64];
    size_t size = 0;
    uint32_t flags = 0;
    uint64_t unique = 0, value = 0;
    shoal_kv_delete(kv, "c-async", 7);
    CHECK(await_outcome(&o, shoal_kv_replace_async(kv, "c-async", 7, "x", 1, 0, 0, on_outcome, &o)) ==
          SHOAL_ENOTSTORED);
    CHECK(await_outcome(&o, shoal_kv_append_async(kv, "c-async", 7, "x", 1, on_outcome, &o)) ==
          SHOAL_ENOTSTORED);
    CHECK(await_outcome(&o, shoal_kv_prepend_async(kv, "c-async", 7, "x", 1, on_outcome, &o)) ==
          SHOAL_ENOTSTORED);
    CHECK(await_outcome(&o, shoal_kv_touch_async(kv, "c-async", 7, 60, on_outcome, &o)) == SHOAL_ENOTFOUND);
    CHECK(await_outcome(&o, shoal_kv_gat_async(kv, "c-async", 7, 60, on_value, &o)) == SHOAL_ENOTFOUND);
    CHECK(await_outcome(&o, shoal_kv_add_async(kv, "c-async", 7, "mid", 3, 5, 0, on_outcome, &o)) ==
          SHOAL_OK);
    CHECK(await_outcome(&o, shoal_kv_add_async(kv, "c-async", 7, "again", 5, 5, 0, on_outcome, &o)) ==
          SHOAL_ENOTSTORED);
    CHECK(await_outcome(&o, shoal_kv_replace_async(kv, "c-async", 7, "MID", 3, 9, 0, on_outcome, &o)) ==
          SHOAL_OK);
    CHECK(await_outcome(&o, shoal_kv_append_async(kv, "c-async", 7, ">>", 2, on_outcome, &o)) == SHOAL_OK);
    CHECK(await_outcome(&o, shoal_kv_prepend_async(kv, "c-async", 7, "<<", 2, on_outcome, &o)) == SHOAL_OK);
    CHECK_RC(shoal_kv_gets(kv, "c-async", 7, out, sizeof out, &size, &flags, &unique), SHOAL_OK);
    CHECK(size == 7 && memcmp(out, "<<MID>>", 7) == 0 && flags == 9);
    /* cas: refused with a unique the value has moved past, stored with the current one. */
    CHECK(await_outcome(&o, shoal_kv_cas_async(kv, "c-async", 7, "two", 3, 2, 0, unique + 1, on_outcome,
                                               &o)) == SHOAL_EEXISTS);
    CHECK(await_outcome(&o, shoal_kv_cas_async(kv, "c-async", 7, "one", 3, 1, 0, unique, on_outcome, &o)) ==
          SHOAL_OK);
    CHECK(await_outcome(&o, shoal_kv_touch_async(kv, "c-async", 7, 3600, on_outcome, &o)) == SHOAL_OK);
    CHECK(await_outcome(&o, shoal_kv_gat_async(kv, "c-async", 7, 3600, on_value, &o)) == SHOAL_OK);
    CHECK(o.size == 3 && memcmp(o.value, "one", 3) == 0 && o.flags == 1);
    /* incr and decr: the new value to the callback; decr stops at 0; a missing key. */
    CHECK_RC(shoal_kv_set(kv, "c-async", 7, "10", 2, 0, 0), SHOAL_OK);
    CHECK(await_outcome(&o, shoal_kv_incr_async(kv, "c-async", 7, 5, on_count, &o)) == SHOAL_OK);
    CHECK(o.count == 15);
    CHECK(await_outcome(&o, shoal_kv_decr_async(kv, "c-async", 7, 20, on_count, &o)) == SHOAL_OK);
    CHECK(o.count == 0);
    CHECK_RC(shoal_kv_incr(kv, "c-async", 7, 0, &value), SHOAL_OK);
    CHECK(value == 0);
    CHECK_RC(shoal_kv_delete(kv, "c-async", 7), SHOAL_OK);
    CHECK(await_outcome(&o, shoal_kv_incr_async(kv, "c-async", 7, 1, on_count, &o)) == SHOAL_ENOTFOUND);
    CHECK(o.count == 0);
    /* cas of a key that is gone. */
    CHECK(await_outcome(&o, shoal_kv_cas_async(kv, "c-async", 7, "x", 1, 0, 0, unique, on_outcome, &o)) ==
          SHOAL_ENOTFOUND);
    /* Bad arguments are refused at the call, and the callback never runs. */
    CHECK_RC(shoal_kv_add_async(kv, "bad key", 7, "x", 1, 0, 0, on_outcome, &o), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_append_async(kv, "c-async", 7, NULL, 1, on_outcome, &o), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_cas_async(kv, "c-async", 7, "x", 1, 0, 0, 1, NULL, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_touch_async(NULL, "c-async", 7, 1, on_outcome, &o), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_incr_async(kv, "c-async", 7, 1, NULL, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_gat_async(kv, "", 0, 1, on_value, &o), SHOAL_EINVAL);
    CHECK(o.done == 0);
}

/* Several host threads share one client. */
struct worker {
    shoal_kv* kv;
    int id, right;
};

static void* work(void* arg) {
    struct worker* me = arg;
    for (int i = 0; i < 200; ++i) {
        char key[32], value[32], out[32];
        int klen = snprintf(key, sizeof key, "t%d-%d", me->id, i);
        int vlen = snprintf(value, sizeof value, "value %d of %d", i, me->id);
        size_t size = 0;
        if (shoal_kv_set(me->kv, key, (size_t)klen, value, (size_t)vlen, 0, 0) == SHOAL_OK &&
            shoal_kv_get(me->kv, key, (size_t)klen, out, sizeof out, &size, NULL) == SHOAL_OK &&
            size == (size_t)vlen && memcmp(out, value, size) == 0) {
            me->right++;
        }
    }
    return NULL;
}

static void test_threads(shoal_kv* kv) {
    enum { threads = 4 };
    pthread_t t[threads];
    struct worker w[threads];
    for (int i = 0; i < threads; ++i) {
        w[i] = (struct worker){kv, i, 0};
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < threads; ++i) {
        pthread_join(t[i], NULL);
        CHECK(w[i].right == 200);
    }
}

/* The server's curr_connections (memcached "stats" over a TCP connection of our own, which
 * counts itself); -1 when it cannot be read. `server` is "127.0.0.1:PORT". */
static int server_connections(const char* server) {
    const char* colon = strrchr(server, ':');
    if (!colon) {
        return -1;
    }
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr*)&sa, sizeof sa) != 0 || write(fd, "stats\r\n", 7) != 7) {
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    char reply[16384];
    size_t got = 0;
    while (got + 1 < sizeof reply) {
        ssize_t n = read(fd, reply + got, sizeof reply - 1 - got);
        if (n <= 0) {
            break;
        }
        got += (size_t)n;
        reply[got] = 0;
        if (strstr(reply, "END\r\n")) {
            break;
        }
    }
    close(fd);
    reply[got] = 0;
    const char* at = strstr(reply, "STAT curr_connections ");
    return at ? atoi(at + strlen("STAT curr_connections ")) : -1;
}

struct destroyer {
    struct waiter w;
    shoal_kv* kv;
};

static void destroy_in_callback(void* user, int status, const char* error) {
    (void)error;
    struct destroyer* d = user;
    shoal_kv_destroy(d->kv); /* on the shard thread: its close must still happen */
    note_done(&d->w, status == SHOAL_OK);
}

/* Destroying a client inside its own callback closes its connection (it used to be skipped,
 * leaving the connection open on the server). TCP servers only (their stats are read here). */
static void test_destroy_in_callback(shoal_runtime* rt) {
    char first[64];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(servers, ","), servers);
    int before = server_connections(first);
    CHECK(before > 0);
    struct destroyer d = {{PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, NULL}, NULL};
    CHECK_RC(shoal_kv_open(rt, first, 0, generous_ms, &d.kv), SHOAL_OK);
    CHECK_RC(shoal_kv_set(d.kv, "destroy-me", 10, "v", 1, 0, 0), SHOAL_OK);
    CHECK(server_connections(first) == before + 1);
    CHECK_RC(shoal_kv_set_async(d.kv, "destroy-me", 10, "w", 1, 0, 0, destroy_in_callback, &d), SHOAL_OK);
    CHECK(wait_for(&d.w, 1) && d.w.ok == 1);
    int now = -1;
    for (int i = 0; i < 500; ++i) { /* the close runs after the callback returned */
        now = server_connections(first);
        if (now == before) {
            break;
        }
        usleep(10000);
    }
    CHECK(now == before);
}

static void test_dead_server(shoal_runtime* rt) {
    shoal_kv* kv = NULL;
    CHECK_RC(shoal_kv_open(rt, dead_server, 0, 2000, &kv), SHOAL_OK);
    char out[4];
    size_t size;
    CHECK_RC(shoal_kv_get(kv, "k", 1, out, sizeof out, &size, NULL), SHOAL_ECONNECTION);
    CHECK(strlen(shoal_last_error()) > 0);
    CHECK_RC(shoal_kv_set(kv, "k", 1, "v", 1, 0, 0), SHOAL_ECONNECTION);
    shoal_kv_destroy(kv);
}

static void test_bad_open(shoal_runtime* rt) {
    shoal_kv* kv = (shoal_kv*)1;
    CHECK_RC(shoal_kv_open(rt, "", 0, 0, &kv), SHOAL_EINVAL);
    CHECK(kv == NULL);
    CHECK_RC(shoal_kv_open(rt, "127.0.0.1:99999", 0, 0, &kv), SHOAL_EINVAL);
    CHECK(strstr(shoal_last_error(), "port") != NULL);
    CHECK_RC(shoal_kv_open(rt, "not-an-address:11211", 0, 0, &kv), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_open(rt, "udp://127.0.0.1:11211", 0, 0, &kv), SHOAL_EINVAL);
    CHECK(strstr(shoal_last_error(), "scheme") != NULL);
    CHECK_RC(shoal_kv_open(rt, servers, 9, 0, &kv), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_open(NULL, servers, 0, 0, &kv), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_open(rt, NULL, 0, 0, &kv), SHOAL_EINVAL);
}

/* ---- registered buffers, the ring channel and the remote pool ---------------------------- */

/* Completion of shoal_pool_lease_async: the lease (or NULL) and the status, and whether a
 * blocking call on the lease was refused there (it would wait for this very thread). */
struct lease_waiter {
    struct waiter w;
    shoal_lease* lease;
    int status, blocking_refused, error_text;
};

static void on_leased(void* user, int status, shoal_lease* lease, const char* error) {
    struct lease_waiter* l = user;
    char byte;
    int refused = lease && shoal_lease_read(lease, 0, &byte, 1) == SHOAL_ESTATE;
    pthread_mutex_lock(&l->w.mutex);
    l->lease = lease;
    l->status = status;
    l->blocking_refused = refused;
    l->error_text = (status == SHOAL_OK) == (error == NULL) && (status == SHOAL_OK) == (lease != NULL);
    pthread_mutex_unlock(&l->w.mutex);
    note_done(&l->w, status == SHOAL_OK);
}

/* Completion of a call that yields no value: its last status. */
struct status_waiter {
    struct waiter w;
    int status;
};

static void on_status(void* user, int status, const char* error) {
    struct status_waiter* s = user;
    pthread_mutex_lock(&s->w.mutex);
    s->status = (status == SHOAL_OK) == (error == NULL) ? status : -1;
    pthread_mutex_unlock(&s->w.mutex);
    note_done(&s->w, status == SHOAL_OK);
}

#define WAITER_INIT                                                                                          \
    { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, NULL }

/* Runs one callback call made by `call` (an expression using &sw) and yields its status. */
#define ASYNC_STATUS(sw, call)                                                                               \
    ((sw).w.done = 0, (call) == SHOAL_OK && wait_for(&(sw).w, 1) ? (sw).status : -2)

/* Without RDMA in the runtime, every RDMA handle is refused with SHOAL_EUNAVAILABLE; NULL
 * handles are SHOAL_EINVAL everywhere, and nothing crashes. */
static void test_rdma_calls_without_rdma(void) {
    shoal_runtime_options opts;
    shoal_runtime_options_init(&opts);
    shoal_runtime* rt = NULL;
    CHECK_RC(shoal_runtime_start(&opts, &rt), SHOAL_OK);
    shoal_buffer* buf = (shoal_buffer*)1;
    CHECK_RC(shoal_buffer_alloc(rt, 0, 64, &buf), SHOAL_EUNAVAILABLE);
    CHECK(buf == NULL && strstr(shoal_last_error(), "without rdma") != NULL);
    shoal_ring_consumer* c = (shoal_ring_consumer*)1;
    CHECK_RC(shoal_ring_consumer_open(rt, 0, "10.0.0.1:0", 4096, &c), SHOAL_EUNAVAILABLE);
    CHECK(c == NULL);
    unsigned char desc[SHOAL_RING_DESCRIPTOR_SIZE] = {0};
    shoal_ring_producer* p = (shoal_ring_producer*)1;
    CHECK_RC(shoal_ring_producer_open(rt, 0, "10.0.0.1:1", desc, sizeof desc, 100, &p), SHOAL_EUNAVAILABLE);
    CHECK(p == NULL);
    shoal_pool* pool = (shoal_pool*)1;
    CHECK_RC(shoal_pool_connect(rt, 0, "10.0.0.1:1", 100, &pool), SHOAL_EUNAVAILABLE);
    CHECK(pool == NULL);
    CHECK_RC(shoal_buffer_alloc(NULL, 0, 64, &buf), SHOAL_EINVAL);
    CHECK_RC(shoal_buffer_alloc(rt, 7, 64, &buf), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_consumer_open(rt, 0, "10.0.0.1:0", 4096, NULL), SHOAL_EINVAL);
    shoal_runtime_destroy(rt);

    /* NULL handles. */
    char out[8];
    size_t size = 0;
    const void* view = NULL;
    CHECK(shoal_buffer_data(NULL) == NULL && shoal_buffer_size(NULL) == 0);
    shoal_buffer_free(NULL);
    CHECK_RC(shoal_ring_receive(NULL, out, sizeof out, &size, 0), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_receive_view(NULL, &view, &size, 0), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_release(NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_receive_async(NULL, NULL, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_consumer_descriptor(NULL, desc, sizeof desc, &size), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_consumer_address(NULL, out, sizeof out), SHOAL_EINVAL);
    CHECK(shoal_ring_consumer_max_message(NULL) == 0 && shoal_ring_producer_max_message(NULL) == 0);
    CHECK(shoal_ring_producer_resume_record(NULL) == 0);
    CHECK_RC(shoal_ring_consumer_close(NULL), SHOAL_EINVAL);
    shoal_ring_consumer_destroy(NULL);
    CHECK_RC(shoal_ring_send(NULL, "x", 1), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_send_buffer(NULL, NULL, 0, 1), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_send_async(NULL, "x", 1, NULL, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_send_buffer_async(NULL, NULL, 0, 1, NULL, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_send_many(NULL, 0, NULL, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_send_many_async(NULL, 0, NULL, NULL, NULL, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_producer_close(NULL), SHOAL_EINVAL);
    shoal_ring_producer_destroy(NULL);
    shoal_lease* lease = (shoal_lease*)1;
    CHECK_RC(shoal_pool_lease(NULL, 64, &lease), SHOAL_EINVAL);
    CHECK(lease == NULL);
    CHECK_RC(shoal_pool_close(NULL), SHOAL_EINVAL);
    shoal_pool_destroy(NULL);
    CHECK(shoal_lease_size(NULL) == 0);
    CHECK_RC(shoal_lease_write(NULL, 0, "x", 1), SHOAL_EINVAL);
    CHECK_RC(shoal_lease_read(NULL, 0, out, 1), SHOAL_EINVAL);
    CHECK_RC(shoal_lease_write_buffer(NULL, 0, NULL, 0, 1), SHOAL_EINVAL);
    CHECK_RC(shoal_lease_read_buffer(NULL, 0, NULL, 0, 1), SHOAL_EINVAL);
    CHECK_RC(shoal_lease_release(NULL), SHOAL_EINVAL);
    shoal_lease_destroy(NULL);
    /* The callback forms refuse the same way, at once (the callback never runs). */
    CHECK_RC(shoal_pool_lease_async(NULL, 64, on_leased, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_pool_lease_async(NULL, 64, NULL, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_lease_write_async(NULL, 0, "x", 1, on_set_done, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_lease_write_async(NULL, 0, NULL, 1, on_set_done, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_lease_read_async(NULL, 0, out, 1, on_set_done, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_lease_write_buffer_async(NULL, 0, NULL, 0, 1, on_set_done, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_lease_read_buffer_async(NULL, 0, NULL, 0, 1, on_set_done, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_lease_release_async(NULL, on_set_done, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_lease_release_async(NULL, NULL, NULL), SHOAL_EINVAL);
    CHECK(strstr(shoal_last_error(), "NULL lease") != NULL);
    CHECK(strcmp(shoal_status_name(SHOAL_EQUOTA), "SHOAL_EQUOTA") == 0);
    CHECK(strcmp(shoal_status_name(SHOAL_EWATERMARK), "SHOAL_EWATERMARK") == 0);
}

static const char* rdma_ip; /* SHOAL_RDMA_IP: the device's address */

/* Message i of the ring tests: ring_size(i) bytes, byte k = (i * 7 + k) & 0xff. */
static size_t ring_size(int i) {
    return i % 50 == 0 ? 3000 : (size_t)(1 + (i * 2654435761u) % 700);
}
static void ring_fill(char* p, int i, size_t n) {
    for (size_t k = 0; k < n; ++k) {
        p[k] = (char)((i * 7 + (int)k) & 0xff);
    }
}
/* The `n` bytes at `data` are those of message i. */
static int ring_bytes_right(const void* data, size_t n, int i) {
    const unsigned char* p = data;
    for (size_t k = 0; k < n; ++k) {
        if (p[k] != (unsigned char)((i * 7 + (int)k) & 0xff)) {
            return 0;
        }
    }
    return 1;
}
static int ring_right(const void* data, size_t n, int i) {
    return n == ring_size(i) && ring_bytes_right(data, n, i);
}

enum { ring_messages = 500, async_tail = 60 };

struct ring_sender {
    shoal_ring_producer* p;
    shoal_buffer* buf; /* of the producer's shard */
    struct waiter w;
    int sent;
};

/* Sends every message, a third each copying, from a registered buffer, and without waiting. */
static void* send_all(void* arg) {
    struct ring_sender* s = arg;
    char msg[4096];
    for (int i = 0; i < ring_messages + async_tail; ++i) {
        size_t n = ring_size(i);
        int rc;
        if (i % 3 == 0) {
            ring_fill(msg, i, n);
            rc = shoal_ring_send(s->p, msg, n);
        } else if (i % 3 == 1) {
            ring_fill(shoal_buffer_data(s->buf), i, n);
            rc = shoal_ring_send_buffer(s->p, s->buf, 0, n);
        } else {
            ring_fill(msg, i, n);
            rc = shoal_ring_send_async(s->p, msg, n, on_set_done, &s->w);
        }
        s->sent += rc == SHOAL_OK;
    }
    return NULL;
}

/* The async receive chain: each callback checks its message and asks for the next one. */
struct ring_receiver {
    shoal_ring_consumer* c;
    struct waiter w;
    int next, right;
};

static void on_ring_message(void* user, int status, const void* data, size_t size, const char* error) {
    (void)error;
    struct ring_receiver* r = user;
    int ok = status == SHOAL_OK && ring_right(data, size, r->next);
    r->right += ok;
    r->next++;
    if (r->next < ring_messages + async_tail && status == SHOAL_OK) {
        /* From the shard thread: the callback form is allowed, and chains. */
        if (shoal_ring_receive_async(r->c, on_ring_message, r) != SHOAL_OK) {
            note_done(&r->w, 0);
            return;
        }
    }
    note_done(&r->w, ok);
}

static void on_last(void* user, int status, const void* data, size_t size, const char* error) {
    (void)error;
    note_done(user, status == SHOAL_OK && size == 4 && memcmp(data, "last", 4) == 0);
}

static void test_ring(shoal_runtime* rt) {
    char addr[64], other_addr[64];
    snprintf(addr, sizeof addr, "%s:0", rdma_ip);
    shoal_ring_consumer* c = NULL;
    CHECK_RC(shoal_ring_consumer_open(rt, 0, addr, 1000, &c), SHOAL_EINVAL); /* not a power of two */
    CHECK(strstr(shoal_last_error(), "power of two") != NULL);
    CHECK_RC(shoal_ring_consumer_open(rt, 0, "nowhere:0", 4096, &c), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_consumer_open(rt, 0, addr, 4096, &c), SHOAL_OK);
    if (!c) {
        return;
    }
    CHECK(shoal_ring_consumer_max_message(c) == 4088);
    char where[64];
    CHECK_RC(shoal_ring_consumer_address(c, where, 4), SHOAL_ETOOSMALL);
    CHECK_RC(shoal_ring_consumer_address(c, where, sizeof where), SHOAL_OK);
    CHECK(strncmp(where, rdma_ip, strlen(rdma_ip)) == 0 && strcmp(where + strlen(rdma_ip), ":0") != 0);
    unsigned char desc[64];
    size_t desc_size = 0;
    CHECK_RC(shoal_ring_consumer_descriptor(c, desc, 8, &desc_size), SHOAL_ETOOSMALL);
    CHECK(desc_size == SHOAL_RING_DESCRIPTOR_SIZE);
    CHECK_RC(shoal_ring_consumer_descriptor(c, desc, sizeof desc, &desc_size), SHOAL_OK);

    /* Nothing sent yet: a receive times out. */
    char out[4096];
    size_t size = 0;
    CHECK_RC(shoal_ring_receive(c, out, sizeof out, &size, 50), SHOAL_ETIMEDOUT);
    CHECK_RC(shoal_ring_receive(c, out, sizeof out, &size, 0), SHOAL_ETIMEDOUT);

    /* Descriptor garbage, and a ring that cannot be read (a wrong rkey, against another
     * consumer so this one's producer is not disturbed), and nobody listening. */
    shoal_ring_producer* p = (shoal_ring_producer*)1;
    CHECK_RC(shoal_ring_producer_open(rt, 1, where, desc, 31, 2000, &p), SHOAL_EINVAL);
    CHECK(p == NULL);
    unsigned char bad[SHOAL_RING_DESCRIPTOR_SIZE];
    memcpy(bad, desc, sizeof bad);
    bad[0] ^= 1;
    CHECK_RC(shoal_ring_producer_open(rt, 1, where, bad, sizeof bad, 2000, &p), SHOAL_EINVAL);
    memcpy(bad, desc, sizeof bad);
    bad[24] ^= 0x40; /* a length that is no ring */
    CHECK_RC(shoal_ring_producer_open(rt, 1, where, bad, sizeof bad, 2000, &p), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_producer_open(rt, 1, where, NULL, sizeof bad, 2000, &p), SHOAL_EINVAL);
    shoal_ring_consumer* other = NULL;
    CHECK_RC(shoal_ring_consumer_open(rt, 0, addr, 4096, &other), SHOAL_OK);
    if (other) {
        unsigned char odesc[SHOAL_RING_DESCRIPTOR_SIZE];
        CHECK_RC(shoal_ring_consumer_descriptor(other, odesc, sizeof odesc, NULL), SHOAL_OK);
        CHECK_RC(shoal_ring_consumer_address(other, other_addr, sizeof other_addr), SHOAL_OK);
        odesc[16] ^= 0x55; /* the rkey */
        CHECK_RC(shoal_ring_producer_open(rt, 1, other_addr, odesc, sizeof odesc, 2000, &p),
                 SHOAL_ECONNECTION);
        CHECK(p == NULL);
        shoal_ring_consumer_destroy(other);
        /* Its address now has nobody listening. */
        CHECK_RC(shoal_ring_producer_open(rt, 1, other_addr, desc, desc_size, 2000, &p), SHOAL_ECONNECTION);
    }

    CHECK_RC(shoal_ring_producer_open(rt, 1, where, desc, desc_size, generous_ms, &p), SHOAL_OK);
    if (!p) {
        shoal_ring_consumer_destroy(c);
        return;
    }
    CHECK(shoal_ring_producer_max_message(p) == 4088);
    CHECK(shoal_ring_producer_resume_record(p) == 0); /* a new ring */
    CHECK_RC(shoal_ring_send(p, out, 4089), SHOAL_EINVAL);
    CHECK(strstr(shoal_last_error(), "exceeds") != NULL);
    shoal_buffer* wrong_shard = NULL;
    CHECK_RC(shoal_buffer_alloc(rt, 0, 64, &wrong_shard), SHOAL_OK);
    CHECK_RC(shoal_ring_send_buffer(p, wrong_shard, 0, 8), SHOAL_EINVAL);
    CHECK(strstr(shoal_last_error(), "shard") != NULL);
    shoal_buffer_free(wrong_shard);

    /* A sender thread against the receiving main thread: every message arrives, in order,
     * intact, through a 4 KiB ring that wraps and fills many times. */
    struct ring_sender s = {
        p, NULL, {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, NULL}, 0};
    CHECK_RC(shoal_buffer_alloc(rt, 1, 4096, &s.buf), SHOAL_OK);
    CHECK_RC(shoal_ring_send_buffer(p, s.buf, 4000, 200), SHOAL_EINVAL); /* past its end */
    pthread_t sender;
    pthread_create(&sender, NULL, send_all, &s);
    int right = 0, too_small = 0;
    for (int i = 0; i < ring_messages; ++i) {
        size_t n = 0;
        if (i % 2 == 0) {
            if (i % 10 == 0) { /* too small: the size comes back and the message stays next */
                too_small += shoal_ring_receive(c, out, 1, &n, 10000) == SHOAL_ETOOSMALL && n == ring_size(i);
            }
            int rc = shoal_ring_receive(c, out, sizeof out, &n, 10000);
            right += rc == SHOAL_OK && ring_right(out, n, i);
        } else {
            const void* view = NULL;
            int rc = shoal_ring_receive_view(c, &view, &n, 10000);
            right += rc == SHOAL_OK && ring_right(view, n, i);
            if (i % 4 == 1) {
                CHECK_RC(shoal_ring_release(c), SHOAL_OK); /* else the next receive releases it */
            }
        }
    }
    CHECK(right == ring_messages);
    CHECK(too_small == ring_messages / 10);
    /* The rest through the callback chain. */
    struct ring_receiver r = {
        c, {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, NULL}, ring_messages, 0};
    CHECK_RC(shoal_ring_receive_async(c, on_ring_message, &r), SHOAL_OK);
    CHECK(wait_for(&r.w, async_tail));
    CHECK(r.right == async_tail);
    pthread_join(sender, NULL);
    CHECK(s.sent == ring_messages + async_tail);
    CHECK(wait_for(&s.w, (ring_messages + async_tail) / 3));
    CHECK(s.w.ok == s.w.done);

    /* One receive at a time: a waiting callback receive makes a blocking one SHOAL_ESTATE. */
    struct waiter idle = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, NULL};
    CHECK_RC(shoal_ring_receive_async(c, on_last, &idle), SHOAL_OK);
    usleep(20000);
    CHECK_RC(shoal_ring_receive(c, out, sizeof out, &size, 0), SHOAL_ESTATE);
    CHECK_RC(shoal_ring_send(p, "last", 4), SHOAL_OK); /* the waiting callback gets it */
    CHECK(wait_for(&idle, 1) && idle.ok == 1);

    /* The producer vanishes: what it sent is still received, then SHOAL_ECONNECTION. */
    CHECK_RC(shoal_ring_send(p, "bye", 3), SHOAL_OK);
    CHECK_RC(shoal_ring_receive(c, out, sizeof out, &size, 10000), SHOAL_OK);
    CHECK(size == 3 && memcmp(out, "bye", 3) == 0);
    shoal_ring_producer_destroy(p);
    CHECK_RC(shoal_ring_receive(c, out, sizeof out, &size, 10000), SHOAL_ECONNECTION);
    CHECK_RC(shoal_ring_receive(c, out, sizeof out, &size, 20), SHOAL_ETIMEDOUT); /* reported once */

    /* A new producer resumes the ring; then the consumer vanishes and its sends fail. */
    CHECK_RC(shoal_ring_producer_open(rt, 1, where, desc, desc_size, generous_ms, &p), SHOAL_OK);
    if (p) {
        /* It resumes after every message the first producer got into the ring. */
        CHECK(shoal_ring_producer_resume_record(p) == (uint64_t)(ring_messages + async_tail + 2));
        CHECK_RC(shoal_ring_send(p, "again", 5), SHOAL_OK);
        CHECK_RC(shoal_ring_receive(c, out, sizeof out, &size, 10000), SHOAL_OK);
        CHECK(size == 5 && memcmp(out, "again", 5) == 0);
        CHECK_RC(shoal_ring_consumer_close(c), SHOAL_OK);
        CHECK_RC(shoal_ring_receive(c, out, sizeof out, &size, 0), SHOAL_ECLOSED);
        int rc = SHOAL_OK;
        for (int i = 0; i < 100000 && rc == SHOAL_OK; ++i) { /* fails once the disconnect is seen */
            rc = shoal_ring_send(p, "x", 1);
        }
        CHECK(rc == SHOAL_ECONNECTION);
        CHECK_RC(shoal_ring_producer_close(p), SHOAL_OK);
        CHECK_RC(shoal_ring_send(p, "x", 1), SHOAL_ECLOSED);
        shoal_ring_producer_destroy(p);
    }
    shoal_ring_consumer_destroy(c);
    shoal_buffer_free(s.buf);
}

/* Message i of the send_many test: every 8th empty, every 8th of the ring's largest size. */
static size_t many_size(int i, size_t largest) {
    return i % 8 == 0 ? 0 : i % 8 == 1 ? largest : ring_size(i);
}

enum { many_rounds = 12, many_count = 32 };

struct many_sender {
    shoal_ring_producer* p;
    size_t largest;
    struct waiter w;
    int sent; /* calls that returned SHOAL_OK */
};

/* Sends many_rounds batches of many_count messages, every other one without waiting. */
static void* send_many_rounds(void* arg) {
    struct many_sender* s = arg;
    static char bytes[many_count][4096];
    const void* data[many_count];
    size_t sizes[many_count];
    for (int round = 0; round < many_rounds; ++round) {
        for (int k = 0; k < many_count; ++k) {
            int i = round * many_count + k;
            sizes[k] = many_size(i, s->largest);
            ring_fill(bytes[k], i, sizes[k]);
            data[k] = sizes[k] ? bytes[k] : NULL;
        }
        int rc = round % 2 == 0
                     ? shoal_ring_send_many(s->p, many_count, data, sizes)
                     : shoal_ring_send_many_async(s->p, many_count, data, sizes, on_set_done, &s->w);
        s->sent += rc == SHOAL_OK;
    }
    return NULL;
}

/* shoal_ring_send_many through a 4 KiB ring: every message arrives, in order and intact, with
 * sizes from 0 to the largest (so the batches wait for room); a too-large message in the middle
 * refuses the whole call and nothing of it arrives. */
static void test_ring_send_many(shoal_runtime* rt) {
    char addr[64], where[64];
    snprintf(addr, sizeof addr, "%s:0", rdma_ip);
    shoal_ring_consumer* c = NULL;
    CHECK_RC(shoal_ring_consumer_open(rt, 0, addr, 4096, &c), SHOAL_OK);
    if (!c) {
        return;
    }
    unsigned char desc[SHOAL_RING_DESCRIPTOR_SIZE];
    CHECK_RC(shoal_ring_consumer_address(c, where, sizeof where), SHOAL_OK);
    CHECK_RC(shoal_ring_consumer_descriptor(c, desc, sizeof desc, NULL), SHOAL_OK);
    shoal_ring_producer* p = NULL;
    CHECK_RC(shoal_ring_producer_open(rt, 1, where, desc, sizeof desc, generous_ms, &p), SHOAL_OK);
    if (!p) {
        shoal_ring_consumer_destroy(c);
        return;
    }
    const size_t largest = shoal_ring_producer_max_message(p);
    static char out[4096];
    size_t size = 0;

    /* Refused before anything is sent: one too large in the middle, NULL arrays or data. */
    static char big[4096];
    const void* data[3] = {"one", big, "three"};
    size_t sizes[3] = {3, largest + 1, 5};
    CHECK_RC(shoal_ring_send_many(p, 3, data, sizes), SHOAL_EINVAL);
    CHECK(strstr(shoal_last_error(), "exceeds") != NULL);
    CHECK_RC(shoal_ring_send_many_async(p, 3, data, sizes, on_set_done, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_send_many(p, 3, NULL, sizes), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_send_many(p, 3, data, NULL), SHOAL_EINVAL);
    const void* holes[2] = {"x", NULL};
    size_t hole_sizes[2] = {1, 1};
    CHECK_RC(shoal_ring_send_many(p, 2, holes, hole_sizes), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_send_many_async(p, 1, data, sizes, NULL, NULL), SHOAL_EINVAL); /* no callback */
    CHECK_RC(shoal_ring_send_many(NULL, 1, data, sizes), SHOAL_EINVAL);
    CHECK_RC(shoal_ring_send_many(p, 0, NULL, NULL), SHOAL_OK); /* nothing to send */
    CHECK_RC(shoal_ring_receive(c, out, sizeof out, &size, 100), SHOAL_ETIMEDOUT);

    /* A sender thread against the receiving main thread. */
    struct many_sender s = {
        p, largest, {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, NULL}, 0};
    pthread_t sender;
    pthread_create(&sender, NULL, send_many_rounds, &s);
    int right = 0;
    for (int i = 0; i < many_rounds * many_count; ++i) {
        size_t n = 0;
        int rc = shoal_ring_receive(c, out, sizeof out, &n, 10000);
        int ok = rc == SHOAL_OK && n == many_size(i, largest) && ring_bytes_right(out, n, i);
        if (!ok && right == i) {
            fprintf(stderr, "send_many: message %d: %s, %zu bytes\n", i, shoal_status_name(rc), n);
        }
        right += ok;
    }
    pthread_join(sender, NULL);
    CHECK(right == many_rounds * many_count);
    CHECK(s.sent == many_rounds);
    CHECK(wait_for(&s.w, many_rounds / 2));
    CHECK(s.w.ok == many_rounds / 2 && s.w.on_shard_thread == many_rounds / 2);
    /* Nothing else arrived (the refused calls sent nothing). */
    CHECK_RC(shoal_ring_receive(c, out, sizeof out, &size, 100), SHOAL_ETIMEDOUT);

    /* Closed: refused. */
    CHECK_RC(shoal_ring_producer_close(p), SHOAL_OK);
    CHECK_RC(shoal_ring_send_many(p, 1, data, sizes), SHOAL_ECLOSED);
    shoal_ring_producer_destroy(p);
    shoal_ring_consumer_destroy(c);
}

/* Completion counters of the buffer tests' callbacks. */
struct buffer_waiter {
    struct waiter w;
    size_t value_offset, size;
    int status;
};

static void on_buffer_get(void* user, int status, size_t value_offset, size_t size, uint32_t flags,
                          const char* error) {
    (void)flags;
    struct buffer_waiter* b = user;
    pthread_mutex_lock(&b->w.mutex);
    b->status = status;
    b->value_offset = value_offset;
    b->size = size;
    pthread_mutex_unlock(&b->w.mutex);
    note_done(&b->w, (status == SHOAL_OK) == (error == NULL));
}

/* Fills `n` bytes at `p` with a pattern that depends on `seed` and the position. */
static void fill_pattern(unsigned char* p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; ++i) {
        p[i] = (unsigned char)((i * 131 + seed * 17 + (i >> 8)) & 0xff);
    }
}

static int has_pattern(const unsigned char* p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; ++i) {
        if (p[i] != (unsigned char)((i * 131 + seed * 17 + (i >> 8)) & 0xff)) {
            return 0;
        }
    }
    return 1;
}

/* The KV calls on registered buffers over shoal-kv's RDMA protocol (`kv` lives on shard 1):
 * values that travel inline and values WRITTEN from the buffer (larger than the inline limit),
 * read back by copy and into a range of another buffer; a range too small, another shard's
 * buffer, a range outside the buffer; the callback forms with the buffer freed right after the
 * call returned. */
/* shoal_kv_get_many_buffer (minor 8) over the keys test_kv_buffers stored: c-buffer-i holds
 * `big` bytes of pattern i for even i, `small` for odd i. */
static void test_kv_many_buffer(shoal_kv* kv, shoal_buffer* dst, shoal_buffer* elsewhere, size_t big,
                                size_t small) {
    unsigned char* d = shoal_buffer_data(dst);
    const char* names[] = {"c-buffer-1", "c-buffer-3", "c-buffer-none", "c-buffer-5"};
    const unsigned pattern[] = {1, 3, 0, 5};
    size_t sizes[] = {10, 10, 13, 10};
    shoal_kv_placed placed[4];
    size_t slot = shoal_kv_buffer_capacity(10, small);
    /* Twice: by control GETs (or locations cached before), then from cached locations. */
    for (int round = 0; round < 2; ++round) {
        memset(placed, 0, sizeof placed);
        CHECK_RC(shoal_kv_get_many_buffer(kv, 4, names, sizes, dst, slot, placed, NULL), SHOAL_OK);
        for (unsigned i = 0; i < 4; ++i) {
            if (i == 2) {
                CHECK(placed[i].status == SHOAL_ENOTFOUND);
                continue;
            }
            CHECK(placed[i].status == SHOAL_OK && placed[i].size == small &&
                  placed[i].flags == 40 + pattern[i]);
            CHECK(placed[i].value_offset >= i * slot && placed[i].value_offset + small <= (i + 1) * slot);
            CHECK(has_pattern(d + placed[i].value_offset, small, pattern[i]));
        }
    }
    /* A big value in a small slot: the slot that fits, nothing lost; with it, the value. */
    const char* mixed[] = {"c-buffer-1", "c-buffer-0"};
    size_t needed = 0;
    CHECK_RC(shoal_kv_get_many_buffer(kv, 2, mixed, sizes, dst, slot, placed, &needed), SHOAL_ETOOSMALL);
    CHECK(needed >= big && needed <= 256 * 1024);
    if (needed >= big && needed <= 256 * 1024) {
        CHECK_RC(shoal_kv_get_many_buffer(kv, 1, mixed + 1, sizes, dst, needed, placed, NULL), SHOAL_OK);
        CHECK(placed[0].status == SHOAL_OK && placed[0].size == big);
        CHECK(placed[0].value_offset + big <= needed && has_pattern(d + placed[0].value_offset, big, 0));
    }
    /* Refused before anything is sent. */
    CHECK_RC(shoal_kv_get_many_buffer(kv, 4, names, sizes, dst, 100000, placed, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_get_many_buffer(kv, 4, names, sizes, elsewhere, slot, placed, NULL), SHOAL_EINVAL);
    const char* bad[] = {"c-buffer-1", "bad key"};
    size_t bad_sizes[] = {10, 7};
    CHECK_RC(shoal_kv_get_many_buffer(kv, 2, bad, bad_sizes, dst, slot, placed, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_get_many_buffer(kv, 4, names, sizes, dst, slot, NULL, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_get_many_buffer(kv, 0, NULL, NULL, dst, slot, NULL, NULL), SHOAL_OK);
}

static void test_kv_buffers(shoal_runtime* rt, shoal_kv* kv) {
    enum { big = 200000, small = 100, keys = 6 };
    shoal_buffer* src = NULL;
    shoal_buffer* dst = NULL;
    shoal_buffer* elsewhere = NULL;
    CHECK_RC(shoal_buffer_alloc(rt, 1, 256 * 1024, &src), SHOAL_OK);
    CHECK_RC(shoal_buffer_alloc(rt, 1, 256 * 1024, &dst), SHOAL_OK);
    CHECK_RC(shoal_buffer_alloc(rt, 0, 4096, &elsewhere), SHOAL_OK);
    if (!src || !dst || !elsewhere) {
        return;
    }
    unsigned char* s = shoal_buffer_data(src);
    unsigned char* d = shoal_buffer_data(dst);
    unsigned char* copy = malloc(big);
    /* Keys spread over both servers; even keys big (granted: WRITTEN from `src`), odd small. */
    for (unsigned i = 0; i < keys; ++i) {
        char key[32];
        int klen = snprintf(key, sizeof key, "c-buffer-%u", i);
        size_t n = i % 2 ? small : big;
        size_t from = 1000 + i; /* not at the buffer's start */
        fill_pattern(s + from, n, i);
        CHECK_RC(shoal_kv_set_buffer(kv, key, (size_t)klen, src, from, n, 40 + i, 0), SHOAL_OK);
        /* The value as a copying client sees it. */
        size_t size = 0;
        uint32_t flags = 0;
        CHECK_RC(shoal_kv_get(kv, key, (size_t)klen, copy, big, &size, &flags), SHOAL_OK);
        CHECK(size == n && flags == 40 + i && has_pattern(copy, n, i));
        /* Into a range of `dst`: twice (the second READs a cached location). Bytes outside the
         * range stay as they were. */
        size_t need = shoal_kv_buffer_capacity((size_t)klen, n);
        for (int round = 0; round < 2; ++round) {
            memset(d, 0xee, 256 * 1024);
            size_t at = 0;
            size = 0;
            flags = 0;
            CHECK_RC(shoal_kv_get_buffer(kv, key, (size_t)klen, dst, 512, need, &at, &size, &flags),
                     SHOAL_OK);
            CHECK(size == n && flags == 40 + i && at >= 512 && at + size <= 512 + need);
            CHECK(at + size <= 256 * 1024 && has_pattern(d + at, n, i));
            int outside_untouched = 1;
            for (size_t j = 0; j < 512; ++j) {
                outside_untouched &= d[j] == 0xee;
            }
            for (size_t j = 512 + need; j < 256 * 1024; ++j) {
                outside_untouched &= d[j] == 0xee;
            }
            CHECK(outside_untouched);
        }
        /* A range too small: the size needed, nothing lost; with that size it works. */
        size_t at = 0;
        size = 0;
        CHECK_RC(shoal_kv_get_buffer(kv, key, (size_t)klen, dst, 0, 50, &at, &size, NULL), SHOAL_ETOOSMALL);
        CHECK(size >= n && size <= need);
        if (size >= n && size <= 256 * 1024) {
            size_t needed = size;
            CHECK_RC(shoal_kv_get_buffer(kv, key, (size_t)klen, dst, 0, needed, &at, &size, NULL), SHOAL_OK);
            CHECK(size == n && has_pattern(d + at, n, i));
        }
    }
    size_t at = 0, size = 0;
    CHECK_RC(shoal_kv_get_buffer(kv, "c-buffer-none", 13, dst, 0, 4096, &at, &size, NULL), SHOAL_ENOTFOUND);
    test_kv_many_buffer(kv, dst, elsewhere, big, small);
    /* Buffers the client cannot use. */
    CHECK_RC(shoal_kv_set_buffer(kv, "c-buffer-0", 10, elsewhere, 0, 10, 0, 0), SHOAL_EINVAL);
    CHECK(strstr(shoal_last_error(), "shard") != NULL);
    CHECK_RC(shoal_kv_get_buffer(kv, "c-buffer-0", 10, elsewhere, 0, 4096, &at, &size, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_set_buffer(kv, "c-buffer-0", 10, src, 256 * 1024 - 10, 11, 0, 0), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_get_buffer(kv, "c-buffer-0", 10, dst, 4096, 256 * 1024, &at, &size, NULL),
             SHOAL_EINVAL);
    CHECK_RC(shoal_kv_get_buffer(kv, "c-buffer-0", 10, dst, 0, 64, NULL, &size, NULL), SHOAL_EINVAL);
    /* The value of c-buffer-0 is intact after the refusals. */
    CHECK_RC(shoal_kv_get(kv, "c-buffer-0", 10, copy, big, &size, NULL), SHOAL_OK);
    CHECK(size == big && has_pattern(copy, big, 0));

    /* Callback forms: the source buffer is freed as soon as the call returned; the set still
     * writes the bytes it held. */
    struct buffer_waiter b = {{PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, kv}, 0, 0, 0};
    fill_pattern(s, big, 99);
    CHECK_RC(shoal_kv_set_buffer_async(kv, "c-buffer-async", 14, src, 0, big, 7, 0, on_set_done, &b.w),
             SHOAL_OK);
    shoal_buffer_free(src);
    CHECK(wait_for(&b.w, 1));
    CHECK(b.w.ok == 1);
    CHECK_RC(shoal_kv_get_buffer_async(kv, "c-buffer-async", 14, dst, 0, 10, on_buffer_get, &b), SHOAL_OK);
    CHECK(wait_for(&b.w, 2));
    CHECK(b.status == SHOAL_ETOOSMALL && b.size >= big);
    size_t need = shoal_kv_buffer_capacity(14, big);
    CHECK_RC(shoal_kv_get_buffer_async(kv, "c-buffer-async", 14, dst, 0, need, on_buffer_get, &b), SHOAL_OK);
    CHECK(wait_for(&b.w, 3));
    CHECK(b.w.ok == 3 && b.status == SHOAL_OK && b.size == big);
    CHECK(b.value_offset + big <= need && has_pattern(d + b.value_offset, big, 99));
    CHECK_RC(shoal_kv_get_buffer_async(kv, "c-buffer-none", 13, dst, 0, need, on_buffer_get, &b), SHOAL_OK);
    CHECK(wait_for(&b.w, 4));
    CHECK(b.status == SHOAL_ENOTFOUND);
    free(copy);
    shoal_buffer_free(dst);
    shoal_buffer_free(elsewhere);
}

static void test_buffers(shoal_runtime* rt) {
    shoal_buffer* b = NULL;
    CHECK_RC(shoal_buffer_alloc(rt, 0, 0, &b), SHOAL_EINVAL);
    CHECK_RC(shoal_buffer_alloc(rt, 0, (size_t)1 << 30, &b), SHOAL_EINVAL);
    CHECK(strstr(shoal_last_error(), "largest") != NULL);
    CHECK_RC(shoal_buffer_alloc(rt, 1, 1000, &b), SHOAL_OK);
    CHECK(b && shoal_buffer_data(b) != NULL && shoal_buffer_size(b) == 1000);
    if (b) {
        memset(shoal_buffer_data(b), 0xab, 1000);
    }
    shoal_buffer_free(b);
}

static void test_pool(shoal_runtime* rt, const char* server, const char* server_pid) {
    /* The server (capi_rdma_peer): largest lease 1 MiB, quota 2 MiB, watermark 3 MiB. */
    const size_t mib = (size_t)1 << 20;
    shoal_pool* pool = NULL;
    char dead[64];
    snprintf(dead, sizeof dead, "%s:1", rdma_ip);
    CHECK_RC(shoal_pool_connect(rt, 1, dead, 2000, &pool), SHOAL_ECONNECTION);
    CHECK(pool == NULL);
    CHECK_RC(shoal_pool_connect(rt, 1, "garbage", 2000, &pool), SHOAL_EINVAL);
    CHECK_RC(shoal_pool_connect(rt, 1, server, generous_ms, &pool), SHOAL_OK);
    shoal_pool* second = NULL;
    CHECK_RC(shoal_pool_connect(rt, 0, server, generous_ms, &second), SHOAL_OK);
    if (!pool || !second) {
        return;
    }
    shoal_lease *a = NULL, *b = NULL, *x = NULL;
    CHECK_RC(shoal_pool_lease(pool, 0, &x), SHOAL_EINVAL);
    CHECK_RC(shoal_pool_lease(pool, 2 * mib, &x), SHOAL_EINVAL); /* above the largest lease */
    CHECK_RC(shoal_pool_lease(pool, mib, &a), SHOAL_OK);
    CHECK_RC(shoal_pool_lease(pool, mib, &b), SHOAL_OK);
    CHECK_RC(shoal_pool_lease(pool, 4096, &x), SHOAL_EQUOTA);
    CHECK(x == NULL && strlen(shoal_last_error()) > 0);
    shoal_lease* c = NULL;
    CHECK_RC(shoal_pool_lease(second, mib, &c), SHOAL_OK);
    CHECK_RC(shoal_pool_lease(second, 4096, &x), SHOAL_EWATERMARK); /* 3 MiB out: the server is full */
    if (!a || !b || !c) {
        return;
    }
    CHECK(shoal_lease_size(a) == mib);

    /* Copying writes and reads, the whole lease and a piece. */
    char* data = malloc(mib);
    char* back = malloc(mib);
    for (size_t i = 0; i < mib; ++i) {
        data[i] = (char)(i * 13 + 5);
    }
    CHECK_RC(shoal_lease_write(a, 0, data, mib), SHOAL_OK);
    memset(back, 0, mib);
    CHECK_RC(shoal_lease_read(a, 0, back, mib), SHOAL_OK);
    CHECK(memcmp(back, data, mib) == 0);
    CHECK_RC(shoal_lease_write(a, 100, "hello", 5), SHOAL_OK);
    CHECK_RC(shoal_lease_read(a, 98, back, 9), SHOAL_OK);
    CHECK(memcmp(back + 2, "hello", 5) == 0 && back[0] == data[98] && back[8] == data[106]);
    CHECK_RC(shoal_lease_write(a, mib - 2, "abc", 3), SHOAL_EINVAL); /* past the end */
    CHECK_RC(shoal_lease_read(a, mib + 1, back, 0), SHOAL_EINVAL);

    /* From and into registered buffers (no copy), checked against the copying read. */
    shoal_buffer *src = NULL, *dst = NULL, *elsewhere = NULL;
    CHECK_RC(shoal_buffer_alloc(rt, 1, 65536, &src), SHOAL_OK);
    CHECK_RC(shoal_buffer_alloc(rt, 1, 65536, &dst), SHOAL_OK);
    CHECK_RC(shoal_buffer_alloc(rt, 0, 64, &elsewhere), SHOAL_OK);
    if (src && dst && elsewhere) {
        for (size_t i = 0; i < 65536; ++i) {
            ((char*)shoal_buffer_data(src))[i] = (char)(i * 7 + 1);
        }
        CHECK_RC(shoal_lease_write_buffer(b, 4096, src, 0, 65536), SHOAL_OK);
        CHECK_RC(shoal_lease_read(b, 4096, back, 65536), SHOAL_OK);
        CHECK(memcmp(back, shoal_buffer_data(src), 65536) == 0);
        CHECK_RC(shoal_lease_read_buffer(b, 4096 + 1000, dst, 10, 5000), SHOAL_OK);
        CHECK(memcmp((char*)shoal_buffer_data(dst) + 10, (char*)shoal_buffer_data(src) + 1000, 5000) == 0);
        CHECK_RC(shoal_lease_write_buffer(b, 0, src, 65000, 1000), SHOAL_EINVAL); /* past the buffer */
        CHECK_RC(shoal_lease_write_buffer(b, 0, elsewhere, 0, 8), SHOAL_EINVAL);  /* another shard */
    }

    /* Release: the lease is closed, and the quota has room again. */
    CHECK_RC(shoal_lease_release(a), SHOAL_OK);
    CHECK_RC(shoal_lease_release(a), SHOAL_OK);
    CHECK_RC(shoal_lease_write(a, 0, "x", 1), SHOAL_ECLOSED);
    shoal_lease_destroy(a);
    CHECK_RC(shoal_pool_lease(pool, mib, &a), SHOAL_OK);
    shoal_lease_destroy(a); /* releases it */

    /* The callback forms: a lease, then 32 writes in flight (copying ones from a buffer the
     * caller overwrites at once, and from a registered buffer), then 32 reads, byte for byte. */
    struct lease_waiter lw = {WAITER_INIT, NULL, 0, 0, 0};
    CHECK_RC(shoal_pool_lease_async(pool, mib, NULL, NULL), SHOAL_EINVAL);
    CHECK_RC(shoal_pool_lease_async(pool, 0, on_leased, &lw), SHOAL_EINVAL);
    CHECK_RC(shoal_pool_lease_async(pool, mib, on_leased, &lw), SHOAL_OK);
    CHECK(wait_for(&lw.w, 1) && lw.status == SHOAL_OK && lw.error_text && lw.blocking_refused);
    CHECK(lw.w.on_shard_thread == 1);
    a = lw.lease;
    lw.w.done = 0;
    CHECK_RC(shoal_pool_lease_async(pool, 4096, on_leased, &lw), SHOAL_OK); /* b and a: quota full */
    CHECK(wait_for(&lw.w, 1) && lw.status == SHOAL_EQUOTA && lw.lease == NULL && lw.error_text);
    shoal_buffer* big = NULL;
    CHECK_RC(shoal_buffer_alloc(rt, 1, mib, &big), SHOAL_OK);
    if (a && big) {
        enum { flight = 32 };
        const size_t chunk = mib / flight;
        char* expect = shoal_buffer_data(big);
        for (size_t i = 0; i < mib; ++i) {
            data[i] = expect[i] = (char)(i * 31 + 7 + i / 4099);
        }
        struct waiter w = WAITER_INIT;
        char* scratch = malloc(chunk);
        for (size_t i = 0; i < flight; ++i) {
            if (i % 2 == 0) {
                memcpy(scratch, data + i * chunk, chunk);
                CHECK_RC(shoal_lease_write_async(a, i * chunk, scratch, chunk, on_set_done, &w), SHOAL_OK);
                memset(scratch, 0, chunk); /* copied before the call returned */
            } else {
                CHECK_RC(shoal_lease_write_buffer_async(a, i * chunk, big, i * chunk, chunk, on_set_done, &w),
                         SHOAL_OK);
            }
        }
        CHECK(wait_for(&w, flight) && w.ok == flight && w.on_shard_thread == flight);
        free(scratch);
        memset(back, 0, mib);
        memset(expect, 0, mib);
        w.done = w.ok = w.on_shard_thread = 0;
        for (size_t i = 0; i < flight; ++i) {
            if (i % 2 == 0) {
                CHECK_RC(shoal_lease_read_async(a, i * chunk, back + i * chunk, chunk, on_set_done, &w),
                         SHOAL_OK);
            } else {
                CHECK_RC(shoal_lease_read_buffer_async(a, i * chunk, big, i * chunk, chunk, on_set_done, &w),
                         SHOAL_OK);
            }
        }
        CHECK(wait_for(&w, flight) && w.ok == flight && w.on_shard_thread == flight);
        int right = 0;
        for (size_t i = 0; i < flight; ++i) {
            const char* got = i % 2 == 0 ? back : expect;
            right += memcmp(got + i * chunk, data + i * chunk, chunk) == 0;
        }
        CHECK(right == flight);
        CHECK_RC(shoal_lease_read(a, 0, back, mib), SHOAL_OK); /* and the blocking read agrees */
        CHECK(memcmp(back, data, mib) == 0);

        /* Bad arguments are refused at once, like the blocking forms'. */
        CHECK_RC(shoal_lease_write_async(a, mib - 2, "abc", 3, on_set_done, &w), SHOAL_EINVAL);
        CHECK_RC(shoal_lease_read_async(a, mib + 1, back, 0, on_set_done, &w), SHOAL_EINVAL);
        CHECK_RC(shoal_lease_read_async(a, 0, NULL, 1, on_set_done, &w), SHOAL_EINVAL);
        CHECK_RC(shoal_lease_write_async(a, 0, "x", 1, NULL, NULL), SHOAL_EINVAL);
        CHECK_RC(shoal_lease_write_buffer_async(a, 0, elsewhere, 0, 8, on_set_done, &w), SHOAL_EINVAL);
        CHECK_RC(shoal_lease_read_buffer_async(a, 0, big, mib - 4, 8, on_set_done, &w), SHOAL_EINVAL);

        /* Release: closed at once, given back by the callback (the quota has room again). */
        struct status_waiter sw = {WAITER_INIT, -3};
        CHECK(ASYNC_STATUS(sw, shoal_lease_release_async(a, on_status, &sw)) == SHOAL_OK);
        CHECK(sw.w.on_shard_thread == 1);
        CHECK_RC(shoal_lease_write_async(a, 0, "x", 1, on_set_done, &w), SHOAL_ECLOSED);
        CHECK_RC(shoal_lease_read(a, 0, back, 1), SHOAL_ECLOSED);
        CHECK(ASYNC_STATUS(sw, shoal_lease_release_async(a, on_status, &sw)) == SHOAL_OK); /* idempotent */
        shoal_lease_destroy(a);
        a = NULL;
        lw.w.done = 0;
        CHECK_RC(shoal_pool_lease_async(pool, mib, on_leased, &lw), SHOAL_OK);
        CHECK(wait_for(&lw.w, 1) && lw.status == SHOAL_OK);
        shoal_lease_destroy(lw.lease);
    }
    shoal_buffer_free(big);

    shoal_buffer_free(elsewhere);

    /* The other pool closes: its lease is closed with it. */
    CHECK_RC(shoal_pool_close(second), SHOAL_OK);
    CHECK_RC(shoal_lease_read(c, 0, back, 1), SHOAL_ECLOSED);
    CHECK_RC(shoal_pool_lease(second, 64, &x), SHOAL_ECLOSED);
    shoal_lease_destroy(c);
    shoal_pool_destroy(second);

    /* The server vanishes: reads and writes fail with SHOAL_ECONNECTION, nothing hangs. */
    if (server_pid) {
        kill((pid_t)atoi(server_pid), SIGKILL);
        int rc = SHOAL_OK;
        for (int i = 0; i < 1000 && rc == SHOAL_OK; ++i) {
            rc = shoal_lease_read(b, 0, back, 64);
            if (rc == SHOAL_OK) {
                usleep(10000);
            }
        }
        CHECK(rc == SHOAL_ECONNECTION);
        CHECK_RC(shoal_pool_lease(pool, 64, &x), SHOAL_ECONNECTION);
        /* And the callback forms report it through their callbacks. */
        struct status_waiter sw = {WAITER_INIT, -3};
        CHECK(ASYNC_STATUS(sw, shoal_lease_read_async(b, 0, back, 64, on_status, &sw)) == SHOAL_ECONNECTION);
        CHECK(ASYNC_STATUS(sw, shoal_lease_write_async(b, 0, "x", 1, on_status, &sw)) == SHOAL_ECONNECTION);
        struct lease_waiter lw2 = {WAITER_INIT, NULL, 0, 0, 0};
        CHECK_RC(shoal_pool_lease_async(pool, 64, on_leased, &lw2), SHOAL_OK);
        CHECK(wait_for(&lw2.w, 1) && lw2.status == SHOAL_ECONNECTION && lw2.lease == NULL && lw2.error_text);
    }

    /* Stop with a pool, buffers and a ring consumer open: they are closed and emptied, calls
     * on them are SHOAL_ECLOSED, nothing crashes. */
    char any[64];
    snprintf(any, sizeof any, "%s:0", rdma_ip);
    shoal_ring_consumer* late = NULL;
    CHECK_RC(shoal_ring_consumer_open(rt, 0, any, 4096, &late), SHOAL_OK);
    CHECK_RC(shoal_runtime_stop(rt), SHOAL_OK);
    if (late) {
        size_t n = 0;
        CHECK_RC(shoal_ring_receive(late, back, 64, &n, 0), SHOAL_ECLOSED);
        CHECK_RC(shoal_ring_receive_async(late, on_last, NULL), SHOAL_ECLOSED);
        CHECK_RC(shoal_ring_consumer_close(late), SHOAL_OK);
        shoal_ring_consumer_destroy(late);
    }
    CHECK(shoal_buffer_data(src) == NULL && shoal_buffer_size(src) == 0);
    CHECK_RC(shoal_pool_lease(pool, 64, &x), SHOAL_ECLOSED);
    CHECK_RC(shoal_pool_lease_async(pool, 64, on_leased, &lw), SHOAL_ECLOSED);
    CHECK_RC(shoal_lease_read_async(b, 0, back, 1, on_set_done, NULL), SHOAL_ECLOSED);
    CHECK_RC(shoal_lease_release_async(b, on_set_done, NULL), SHOAL_ECLOSED); /* no shard to run it */
    CHECK_RC(shoal_lease_release(b), SHOAL_OK);
    shoal_lease_destroy(b);
    CHECK_RC(shoal_buffer_alloc(rt, 0, 64, &elsewhere), SHOAL_ECLOSED);
    shoal_buffer_free(src);
    shoal_buffer_free(dst);
    shoal_pool_destroy(pool);
    free(data);
    free(back);
}

/* The RDMA parts: on a device (SHOAL_C_TEST_RDMA), with a pool server (SHOAL_POOL_SERVER). */
static void test_rdma_parts(void) {
    rdma_ip = getenv("SHOAL_RDMA_IP");
    if (!rdma_ip) {
        fprintf(stderr, "SHOAL_RDMA_IP is not set\n");
        ++failed;
        return;
    }
    shoal_runtime_options opts = options(2);
    shoal_runtime* rt = NULL;
    CHECK_RC(shoal_runtime_start(&opts, &rt), SHOAL_OK);
    if (!rt) {
        return;
    }
    lap("rdma runtime start");
    test_buffers(rt);
    test_ring(rt);
    lap("ring channel");
    test_ring_send_many(rt);
    lap("ring send_many");
    const char* server = getenv("SHOAL_POOL_SERVER");
    if (server) {
        test_pool(rt, server, getenv("SHOAL_POOL_SERVER_PID"));
        lap("remote pool");
    } else {
        fprintf(stderr, "SHOAL_POOL_SERVER is not set: the remote pool is not tested\n");
        ++failed;
    }
    shoal_runtime_destroy(rt);
}

int main(void) {
    servers = getenv("SHOAL_KV_SERVERS");
    dead_server = getenv("SHOAL_DEAD_SERVER");
    if (!servers || !dead_server) {
        fprintf(stderr, "run me through with_kv_servers.sh\n");
        return 2;
    }
    use_rdma = getenv("SHOAL_C_TEST_RDMA") != NULL;
    lap("start");
    test_status_names_and_version();
    test_bad_runtime_use();
    test_rdma_calls_without_rdma();
    lap("test_rdma_calls_without_rdma");
    if (!use_rdma) {
        test_rdma_without_a_device();
    } else {
        test_rdma_parts();
    }

    shoal_runtime_options opts = options(2);
    shoal_runtime* rt = NULL;
    CHECK_RC(shoal_runtime_start(&opts, &rt), SHOAL_OK);
    if (!rt) {
        fprintf(stderr, "no runtime: %s\n", shoal_last_error());
        return 1;
    }
    CHECK(shoal_runtime_shards(rt) == 2);
    shoal_runtime* second = NULL;
    CHECK_RC(shoal_runtime_start(&opts, &second), SHOAL_ESTATE);

    test_bad_open(rt);
    shoal_kv* kv = NULL;
    CHECK_RC(shoal_kv_open(rt, servers, 1, generous_ms, &kv), SHOAL_OK);
    test_round_trips(kv);
    lap("test_round_trips");
    test_get_many(kv);
    lap("test_get_many");
    test_async(kv);
    lap("test_async");
    test_threads(kv);
    lap("test_threads");
    if (use_rdma) {
        test_kv_buffers(rt, kv);
        lap("test_kv_buffers");
    }
    test_conditional_stores(kv);
    test_conditional_async(kv);
    lap("test_conditional_stores");
    test_stats(kv);
    lap("test_stats");
    test_counters_touch_flush(kv);
    lap("test_counters_touch_flush");
    test_dead_server(rt);
    lap("test_dead_server");
    if (!use_rdma) {
        test_destroy_in_callback(rt);
    }

    /* Close: later calls are refused; close is idempotent. */
    shoal_kv* other = NULL;
    CHECK_RC(shoal_kv_open(rt, servers, 0, generous_ms, &other), SHOAL_OK);
    CHECK_RC(shoal_kv_close(kv), SHOAL_OK);
    CHECK_RC(shoal_kv_close(kv), SHOAL_OK);
    CHECK_RC(shoal_kv_set(kv, "k", 1, "v", 1, 0, 0), SHOAL_ECLOSED);
    shoal_kv_destroy(kv);
    /* Stop with a client open: it is closed for its owner, calls are refused, nothing hangs. */
    CHECK_RC(shoal_kv_set(other, "still", 5, "here", 4, 0, 0), SHOAL_OK);
    CHECK_RC(shoal_runtime_stop(rt), SHOAL_OK);
    CHECK_RC(shoal_runtime_stop(rt), SHOAL_OK);
    CHECK_RC(shoal_kv_set(other, "k", 1, "v", 1, 0, 0), SHOAL_ECLOSED);
    CHECK_RC(shoal_kv_open(rt, servers, 0, 0, &kv), SHOAL_ECLOSED);
    shoal_runtime_destroy(rt);
    shoal_kv_destroy(other); /* after its runtime: still fine */

    /* A new runtime after the old one stopped, and the value stored before is there. */
    opts = options(1);
    CHECK_RC(shoal_runtime_start(&opts, &rt), SHOAL_OK);
    CHECK_RC(shoal_kv_open(rt, servers, 0, generous_ms, &kv), SHOAL_OK);
    char out[8];
    size_t size = 0;
    CHECK_RC(shoal_kv_get(kv, "still", 5, out, sizeof out, &size, NULL), SHOAL_OK);
    CHECK(size == 4 && memcmp(out, "here", 4) == 0);
    shoal_kv_destroy(kv);
    shoal_runtime_destroy(rt);

    lap("close, stop, restart");
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
