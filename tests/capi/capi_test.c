/* What the C ABI tests share (capi_test.h). */

#define _GNU_SOURCE
#include "capi_test.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

int passed, failed;
int use_rdma;

void capi_test_begin(int argc, char** argv) {
    use_rdma = getenv("SHOAL_C_TEST_RDMA") != NULL || (argc > 1 && strcmp(argv[1], "--rdma") == 0);
    lap("start");
}

int capi_test_end(void) {
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

void lap(const char* what) {
    static struct timespec last;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (last.tv_sec) {
        fprintf(stderr, "  %-28s %6.2f s\n", what,
                (double)(now.tv_sec - last.tv_sec) + (double)(now.tv_nsec - last.tv_nsec) / 1e9);
    }
    last = now;
}

shoal_runtime_options options(unsigned shards) {
    shoal_runtime_options opts;
    shoal_runtime_options_init(&opts);
    opts.shards = shards;
    opts.rdma = use_rdma;
    return opts;
}

shoal_runtime* start_runtime(unsigned shards) {
    shoal_runtime_options opts = options(shards);
    shoal_runtime* rt = NULL;
    CHECK_RC(shoal_runtime_start(&opts, &rt), SHOAL_OK);
    if (!rt) {
        fprintf(stderr, "no runtime: %s\n", shoal_last_error());
        return NULL;
    }
    lap("runtime start");
    return rt;
}

const char* required_env(const char* name, const char* lost) {
    const char* value = getenv(name);
    if (!value) {
        fprintf(stderr, "%s is not set%s%s\n", name, lost ? ": " : "", lost ? lost : "");
        ++failed;
    }
    return value;
}

void note_done(struct waiter* w, int ok) {
    char name[32] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);
    pthread_mutex_lock(&w->mutex);
    w->done++;
    w->ok += ok;
    w->on_shard_thread += strncmp(name, "shoal-shard-", 12) == 0;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->mutex);
}

void on_set_done(void* user, int status, const char* error) {
    note_done(user, status == SHOAL_OK && error == NULL);
}

int wait_for(struct waiter* w, int count) {
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
