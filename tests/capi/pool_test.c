/* The C ABI's remote memory pool (shoal_pool, shoal_lease): NULL handles and the status names of
 * its refusals; with --rdma, on a device (the Soft-RoCE guest, SHOAL_RDMA_IP) against a pool
 * server (SHOAL_POOL_SERVER, started by with_pool_server.sh), leases, their reads and writes,
 * the quota and watermark, the server vanishing and the runtime stopping. */

#define _GNU_SOURCE
#include "capi_test.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* Runs one callback call made by `call` (an expression using &sw) and yields its status. */
#define ASYNC_STATUS(sw, call)                                                                               \
    ((sw).w.done = 0, (call) == SHOAL_OK && wait_for(&(sw).w, 1) ? (sw).status : -2)

/* A ring receive that must never complete (it is refused at once). */
static void on_message(void* user, int status, const void* data, size_t size, const char* error) {
    (void)user;
    (void)status;
    (void)data;
    (void)size;
    (void)error;
}

/* NULL pools and leases are refused with SHOAL_EINVAL, the callback forms too (the callback never
 * runs), and nothing crashes. */
static void test_null_pools(void) {
    char out[8];
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
        CHECK_RC(shoal_ring_receive_async(late, on_message, NULL), SHOAL_ECLOSED);
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

int main(int argc, char** argv) {
    capi_test_begin(argc, argv);
    test_null_pools();
    if (use_rdma && (rdma_ip = required_env("SHOAL_RDMA_IP", NULL)) != NULL) {
        const char* server = required_env("SHOAL_POOL_SERVER", "the remote pool is not tested");
        shoal_runtime* rt = start_runtime(2);
        if (rt) {
            if (server) {
                test_pool(rt, server, getenv("SHOAL_POOL_SERVER_PID"));
                lap("remote pool");
            }
            shoal_runtime_destroy(rt);
        }
    }
    return capi_test_end();
}
