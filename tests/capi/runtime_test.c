/* The C ABI's runtime (shoal_runtime): status names and the version, bad options and NULL
 * handles, a runtime without RDMA refusing every RDMA handle, RDMA asked for without a device.
 * Needs no server. */

#define _GNU_SOURCE
#include "capi_test.h"

#include <string.h>

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
}

/* Without RDMA in the runtime, every RDMA handle is refused with SHOAL_EUNAVAILABLE (NULL handles
 * are refused in the tests of each handle). */
static void test_rdma_handles_without_rdma(void) {
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
}

int main(int argc, char** argv) {
    capi_test_begin(argc, argv);
    test_status_names_and_version();
    test_bad_runtime_use();
    test_rdma_handles_without_rdma();
    lap("test_rdma_handles_without_rdma");
    test_rdma_without_a_device();
    return capi_test_end();
}
