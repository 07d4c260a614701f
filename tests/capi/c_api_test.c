/* The C ABI from a C program: the runtime, error codes and texts, the KV client against two
 * running shoal-kv servers (SHOAL_KV_SERVERS, set by with_kv_servers.sh), blocking and callback
 * forms, several caller threads, a server that is not there, calls after close and stop. */

#define _GNU_SOURCE
#include "shoal/shoal_c.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int passed, failed;

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

static void on_get(void* user, int status, const void* value, size_t size, uint32_t flags, const char* error) {
    (void)error;
    struct waiter* w = user;
    int ok = status == SHOAL_OK && size == 8 && memcmp(value, "async-v", 7) == 0 && flags == 7;
    note_done(w, ok);
}

static void on_missing(void* user, int status, const void* value, size_t size, uint32_t flags, const char* error) {
    (void)value;
    (void)size;
    (void)flags;
    note_done(user, status == SHOAL_ENOTFOUND && error != NULL);
}

static int wait_for(struct waiter* w, int count) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 30;
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

int main(void) {
    servers = getenv("SHOAL_KV_SERVERS");
    dead_server = getenv("SHOAL_DEAD_SERVER");
    if (!servers || !dead_server) {
        fprintf(stderr, "run me through with_kv_servers.sh\n");
        return 2;
    }
    use_rdma = getenv("SHOAL_C_TEST_RDMA") != NULL;
    test_status_names_and_version();
    test_bad_runtime_use();
    if (!use_rdma) {
        test_rdma_without_a_device();
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
    CHECK_RC(shoal_kv_open(rt, servers, 1, 5000, &kv), SHOAL_OK);
    test_round_trips(kv);
    test_get_many(kv);
    test_async(kv);
    test_threads(kv);
    test_dead_server(rt);

    /* Close: later calls are refused; close is idempotent. */
    shoal_kv* other = NULL;
    CHECK_RC(shoal_kv_open(rt, servers, 0, 5000, &other), SHOAL_OK);
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
    CHECK_RC(shoal_kv_open(rt, servers, 0, 5000, &kv), SHOAL_OK);
    char out[8];
    size_t size = 0;
    CHECK_RC(shoal_kv_get(kv, "still", 5, out, sizeof out, &size, NULL), SHOAL_OK);
    CHECK(size == 4 && memcmp(out, "here", 4) == 0);
    shoal_kv_destroy(kv);
    shoal_runtime_destroy(rt);

    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
