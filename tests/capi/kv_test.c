/* The C ABI's KV client (shoal_kv) against two running shoal-kv servers (SHOAL_KV_SERVERS, set by
 * with_kv_servers.sh; rdma:// ones with --rdma): round trips, conditional stores, counters,
 * statistics, blocking and callback forms, several caller threads, a server that is not there,
 * calls after close and stop. */

#define _GNU_SOURCE
#include "capi_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char* servers;
static const char* dead_server;

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
    /* NULL clients. */
    shoal_kv_destroy(NULL);
    CHECK_RC(shoal_kv_set(NULL, "k", 1, "v", 1, 0, 0), SHOAL_EINVAL);
    CHECK_RC(shoal_kv_close(NULL), SHOAL_EINVAL);
}

int main(int argc, char** argv) {
    servers = getenv("SHOAL_KV_SERVERS");
    dead_server = getenv("SHOAL_DEAD_SERVER");
    if (!servers || !dead_server) {
        fprintf(stderr, "run me through with_kv_servers.sh\n");
        return 2;
    }
    capi_test_begin(argc, argv);

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
    return capi_test_end();
}
