/* The C ABI's ring channel (shoal_ring_consumer, shoal_ring_producer): NULL handles; with --rdma,
 * on a device (the Soft-RoCE guest, SHOAL_RDMA_IP), the ring itself and shoal_ring_send_many.
 * Needs no server. */

#define _GNU_SOURCE
#include "capi_test.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

/* NULL consumers and producers are refused with SHOAL_EINVAL, and nothing crashes. */
static void test_null_rings(void) {
    unsigned char desc[SHOAL_RING_DESCRIPTOR_SIZE] = {0};
    char out[8];
    size_t size = 0;
    const void* view = NULL;
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

int main(int argc, char** argv) {
    capi_test_begin(argc, argv);
    test_null_rings();
    if (use_rdma && (rdma_ip = required_env("SHOAL_RDMA_IP", NULL)) != NULL) {
        shoal_runtime* rt = start_runtime(2);
        if (rt) {
            test_ring(rt);
            lap("ring channel");
            test_ring_send_many(rt);
            lap("ring send_many");
            shoal_runtime_destroy(rt);
        }
    }
    return capi_test_end();
}
