/* The C ABI's KV calls on registered buffers (shoal_kv_set_buffer, shoal_kv_get_buffer,
 * shoal_kv_get_many_buffer and their callback forms) over shoal-kv's RDMA protocol: on a device
 * (the Soft-RoCE guest), against two shoal-kv servers started by with_kv_servers.sh --rdma. */

#define _GNU_SOURCE
#include "capi_test.h"

#include <stdlib.h>
#include <string.h>

static const char* servers;

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

/* The KV calls on registered buffers over shoal-kv's RDMA protocol (`kv` lives on shard 1):
 * values that travel inline and values WRITTEN from the buffer (larger than the inline limit),
 * read back by copy and into a range of another buffer; a range too small, another shard's
 * buffer, a range outside the buffer; the callback forms with the buffer freed right after the
 * call returned. */
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

int main(int argc, char** argv) {
    servers = getenv("SHOAL_KV_SERVERS");
    capi_test_begin(argc, argv);
    if (!servers || !use_rdma) {
        fprintf(stderr, "run me through with_kv_servers.sh --rdma\n");
        return 2;
    }
    shoal_runtime* rt = start_runtime(2);
    if (!rt) {
        return capi_test_end();
    }
    shoal_kv* kv = NULL;
    CHECK_RC(shoal_kv_open(rt, servers, 1, generous_ms, &kv), SHOAL_OK);
    if (kv) {
        test_kv_buffers(rt, kv);
        lap("test_kv_buffers");
    }
    shoal_kv_destroy(kv);
    shoal_runtime_destroy(rt);
    return capi_test_end();
}
