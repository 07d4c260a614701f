// Prints the server index libmemcached chooses for each key read from stdin (one per line), so
// that kv_client_tests can compare kv::ketama_ring with the real library.
// Usage: libmemcached_ketama weighted|plain HOST:PORT:WEIGHT...
#include <libmemcached/memcached.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
    if (argc < 3 || (strcmp(argv[1], "weighted") != 0 && strcmp(argv[1], "plain") != 0)) {
        fprintf(stderr, "usage: %s weighted|plain HOST:PORT:WEIGHT...\n", argv[0]);
        return 2;
    }
    memcached_st* m = memcached_create(nullptr);
    if (strcmp(argv[1], "weighted") == 0) {
        memcached_behavior_set(m, MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, 1);
    } else {
        memcached_behavior_set(m, MEMCACHED_BEHAVIOR_KETAMA, 1);
        memcached_behavior_set(m, MEMCACHED_BEHAVIOR_HASH, MEMCACHED_HASH_MD5);
    }
    for (int i = 2; i < argc; ++i) {
        char host[256];
        unsigned port = 0, weight = 0;
        if (sscanf(argv[i], "%255[^:]:%u:%u", host, &port, &weight) != 3) {
            fprintf(stderr, "bad server %s (want HOST:PORT:WEIGHT)\n", argv[i]);
            return 2;
        }
        if (memcached_server_add_with_weight(m, host, in_port_t(port), weight) != MEMCACHED_SUCCESS) {
            fprintf(stderr, "cannot add server %s\n", argv[i]);
            return 2;
        }
    }
    char line[512];
    while (fgets(line, sizeof line, stdin)) {
        size_t n = strcspn(line, "\n");
        printf("%u\n", memcached_generate_hash(m, line, n));
    }
    memcached_free(m);
    return 0;
}
