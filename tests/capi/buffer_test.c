/* The C ABI's registered buffers (shoal_buffer): NULL handles; with --rdma, on a device (the
 * Soft-RoCE guest), sizes and shards. Needs no server. */

#define _GNU_SOURCE
#include "capi_test.h"

#include <string.h>

/* NULL buffers are empty, and freeing one does nothing. */
static void test_null_buffers(void) {
    CHECK(shoal_buffer_data(NULL) == NULL && shoal_buffer_size(NULL) == 0);
    shoal_buffer_free(NULL);
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

int main(int argc, char** argv) {
    capi_test_begin(argc, argv);
    test_null_buffers();
    if (use_rdma) {
        shoal_runtime* rt = start_runtime(2);
        if (rt) {
            test_buffers(rt);
            shoal_runtime_destroy(rt);
        }
    }
    return capi_test_end();
}
