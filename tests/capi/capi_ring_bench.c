/* The C ABI's ring sends, measured (on an RDMA device: the Soft-RoCE guest): COUNT messages of
 * SIZE bytes from the calling thread as COUNT shoal_ring_send calls, then as COUNT / BATCH
 * shoal_ring_send_many calls of BATCH messages, into a ring large enough for all of them (so
 * the consumer's pace is not measured); the consumer (another shard, same process) drains and
 * checks the count after each timed run. Prints one line per run and the ratio of the rates.
 *
 * usage: SHOAL_RDMA_IP=... capi_ring_bench [COUNT [SIZE [BATCH [ROUNDS]]]]   (32768 64 32 3) */

#define _GNU_SOURCE
#include "shoal/shoal_c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int die(const char* what, int rc) {
    fprintf(stderr, "%s: %s: %s\n", what, shoal_status_name(rc), shoal_last_error());
    return 1;
}

/* Receives `count` messages of `size` bytes; 0 when all came. */
static int drain(shoal_ring_consumer* c, int count, size_t size) {
    char out[4096];
    for (int i = 0; i < count; ++i) {
        size_t n = 0;
        int rc = shoal_ring_receive(c, out, sizeof out, &n, 10000);
        if (rc != SHOAL_OK || n != size) {
            return die("receive", rc);
        }
    }
    return 0;
}

int main(int argc, char** argv) {
    const char* ip = getenv("SHOAL_RDMA_IP");
    int count = argc > 1 ? atoi(argv[1]) : 32768;
    size_t size = argc > 2 ? (size_t)atoi(argv[2]) : 64;
    int batch = argc > 3 ? atoi(argv[3]) : 32;
    int rounds = argc > 4 ? atoi(argv[4]) : 3;
    if (!ip || count <= 0 || batch <= 0 || count % batch != 0 || size > 4096) {
        fprintf(stderr, "usage: SHOAL_RDMA_IP=... capi_ring_bench [COUNT [SIZE [BATCH [ROUNDS]]]]\n");
        return 2;
    }
    shoal_runtime_options opts;
    shoal_runtime_options_init(&opts);
    opts.shards = 2;
    opts.rdma = 1;
    shoal_runtime* rt = NULL;
    int rc = shoal_runtime_start(&opts, &rt);
    if (rc != SHOAL_OK) {
        return die("runtime", rc);
    }
    /* Room for every message: an entry is the message rounded up to 8, plus 8. */
    size_t capacity = 4096;
    while (capacity < (size_t)count * (((size + 7) & ~(size_t)7) + 8)) {
        capacity *= 2;
    }
    char addr[64], where[64];
    snprintf(addr, sizeof addr, "%s:0", ip);
    shoal_ring_consumer* c = NULL;
    shoal_ring_producer* p = NULL;
    unsigned char desc[SHOAL_RING_DESCRIPTOR_SIZE];
    if ((rc = shoal_ring_consumer_open(rt, 0, addr, capacity, &c)) != SHOAL_OK ||
        (rc = shoal_ring_consumer_address(c, where, sizeof where)) != SHOAL_OK ||
        (rc = shoal_ring_consumer_descriptor(c, desc, sizeof desc, NULL)) != SHOAL_OK ||
        (rc = shoal_ring_producer_open(rt, 1, where, desc, sizeof desc, 10000, &p)) != SHOAL_OK) {
        return die("open", rc);
    }
    char* msg = calloc(1, size + 1);
    const void** data = malloc(sizeof(void*) * (size_t)batch);
    size_t* sizes = malloc(sizeof(size_t) * (size_t)batch);
    for (int k = 0; k < batch; ++k) {
        data[k] = msg;
        sizes[k] = size;
    }
    double one_total = 0, many_total = 0;
    for (int r = 0; r < rounds; ++r) {
        double t0 = now_s();
        for (int i = 0; i < count; ++i) {
            if ((rc = shoal_ring_send(p, msg, size)) != SHOAL_OK) {
                return die("shoal_ring_send", rc);
            }
        }
        double one = now_s() - t0;
        if (drain(c, count, size)) {
            return 1;
        }
        t0 = now_s();
        for (int i = 0; i < count; i += batch) {
            if ((rc = shoal_ring_send_many(p, (size_t)batch, data, sizes)) != SHOAL_OK) {
                return die("shoal_ring_send_many", rc);
            }
        }
        double many = now_s() - t0;
        if (drain(c, count, size)) {
            return 1;
        }
        printf("round %d: %d x %zu B: shoal_ring_send %.0f msg/s (%.2f us/msg), shoal_ring_send_many(%d) "
               "%.0f msg/s (%.2f us/msg), ratio %.1f\n",
               r, count, size, count / one, one * 1e6 / count, batch, count / many, many * 1e6 / count,
               one / many);
        one_total += one;
        many_total += many;
    }
    printf("all rounds: ratio %.1f (capacity %zu)\n", one_total / many_total, capacity);
    shoal_ring_producer_destroy(p);
    shoal_ring_consumer_destroy(c);
    shoal_runtime_destroy(rt);
    free(msg);
    free((void*)data);
    free(sizes);
    return 0;
}
