/* shoal's C ABI: the shoal runtime and its clients for programs in C and in any language with a
 * C foreign-function interface (C# P/Invoke, Python ctypes, ...). No C++ type and no exception
 * crosses it.
 *
 * Conventions
 * - Every function returning `int` returns a `shoal_status`: SHOAL_OK (0) or an error code.
 *   On an error, shoal_last_error() gives a sentence saying what went wrong.
 * - Handles are opaque pointers. A handle is closed by its _close/_stop function (later calls on
 *   it return SHOAL_ECLOSED) and freed by its _destroy function (after which it must not be
 *   used). NULL handles are refused with SHOAL_EINVAL.
 * - Keys and values passed in are read during the call only (the _async forms copy them before
 *   returning); the caller keeps ownership. Memory the library hands out says who frees it.
 * - Blocking functions may be called from any thread except a runtime's own shard threads (where
 *   they return SHOAL_ESTATE: use the _async forms there). Callbacks of _async functions run on
 *   the shard thread of the handle (named "shoal-shard-N"); they must not block.
 */
#ifndef SHOAL_SHOAL_C_H
#define SHOAL_SHOAL_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHOAL_C_API __attribute__((visibility("default")))

/** Version of this header; shoal_version() tells the library's. */
#define SHOAL_C_VERSION_MAJOR 0
#define SHOAL_C_VERSION_MINOR 1

/** Outcome of a call. */
typedef enum shoal_status {
    SHOAL_OK = 0,         /**< done */
    SHOAL_EINVAL = 1,     /**< a NULL handle or pointer, a bad key, size or option */
    SHOAL_ECLOSED = 2,    /**< the handle is closed, or its runtime stopped */
    SHOAL_ESTATE = 3,     /**< not possible now (a runtime already runs; a blocking call on a shard thread) */
    SHOAL_ENOTFOUND = 4,  /**< the key does not exist */
    SHOAL_ETOOSMALL = 5,  /**< the output buffer is too small (the size needed is returned) */
    SHOAL_ENOTSTORED = 6, /**< add of an existing key, replace of a missing one */
    SHOAL_EEXISTS = 7,    /**< cas: the value changed since its unique was read */
    SHOAL_ECONNECTION = 8,   /**< cannot connect, the connection broke, or the peer made no sense */
    SHOAL_ESERVER = 9,       /**< the server refused the request (its message in shoal_last_error) */
    SHOAL_ETIMEDOUT = 10,    /**< the request timed out */
    SHOAL_ENOMEM = 11,       /**< out of memory */
    SHOAL_EINTERNAL = 12,    /**< anything else (a bug: the message says what) */
    SHOAL_EUNAVAILABLE = 13, /**< RDMA asked for where there is no usable RDMA device */
} shoal_status;

/** The library's version as MAJOR * 10000 + MINOR * 100 + PATCH. */
SHOAL_C_API int shoal_version(void);
/** The enumerator's name of `status` ("SHOAL_ENOTFOUND"); "SHOAL_UNKNOWN" for other values. Static text. */
SHOAL_C_API const char* shoal_status_name(int status);
/** What the last failed call on the calling thread went wrong with ("" if none failed yet). The
 *  text belongs to the library and stays valid until the thread's next failing call. */
SHOAL_C_API const char* shoal_last_error(void);
/** Frees memory the library allocated for the caller (values of shoal_kv_get_copy and
 *  shoal_kv_get_many). NULL is ignored. */
SHOAL_C_API void shoal_free(void* p);

/* ---------------------------------------------------------------------------------------- */
/* The runtime: shoal's shards, running on threads of their own.                             */

/** Options of shoal_runtime_start. Fill with shoal_runtime_options_init first, so fields added
 *  later get their defaults. */
typedef struct shoal_runtime_options {
    size_t struct_size; /**< sizeof(shoal_runtime_options), set by shoal_runtime_options_init */
    unsigned shards;    /**< number of shards (threads); default 1 */
    int pin;            /**< non-zero: pin shard i to the i-th CPU the process may use; default 0 */
    int rdma;           /**< non-zero: start RDMA on every shard (first device) so clients may use
                             rdma:// servers; SHOAL_EUNAVAILABLE without a device; default 0 */
} shoal_runtime_options;

/** A running set of shards. */
typedef struct shoal_runtime shoal_runtime;

/** Sets every field of `opts` to its default. */
SHOAL_C_API void shoal_runtime_options_init(shoal_runtime_options* opts);
/** Starts a runtime (NULL options: the defaults) and returns once its shards accept work. One
 *  runtime per process at a time: SHOAL_ESTATE while another runs. */
SHOAL_C_API int shoal_runtime_start(const shoal_runtime_options* opts, shoal_runtime** out);
/** Closes every client opened on it (their calls then return SHOAL_ECLOSED), lets work in flight
 *  finish and stops the shards. Idempotent. Not from a shard thread. */
SHOAL_C_API int shoal_runtime_stop(shoal_runtime* rt);
/** Stops the runtime if it still runs and frees it. Clients opened on it stay valid as closed
 *  handles until destroyed. NULL is ignored. */
SHOAL_C_API void shoal_runtime_destroy(shoal_runtime* rt);
/** Number of shards (0 for NULL). */
SHOAL_C_API unsigned shoal_runtime_shards(const shoal_runtime* rt);

/* ---------------------------------------------------------------------------------------- */
/* The KV client: memcached-protocol servers (shoal-kv, memcached), keys spread over several  */
/* servers the way libmemcached's ketama spreads them.                                        */

/** A client of one or more servers; lives on one shard of its runtime. */
typedef struct shoal_kv shoal_kv;

/** One result of shoal_kv_get_many. `data` is allocated by the library (free it with
 *  shoal_free) when status is SHOAL_OK, NULL otherwise. */
typedef struct shoal_kv_value {
    int status;     /**< SHOAL_OK or SHOAL_ENOTFOUND for this key */
    void* data;     /**< the value's bytes */
    size_t size;    /**< their number */
    uint32_t flags; /**< the client flags stored with it */
} shoal_kv_value;

/** Completion of an _async call that yields no value: `error` is NULL on success, else the
 *  failure's text (valid during the callback only). */
typedef void (*shoal_done_cb)(void* user, int status, const char* error);
/** Completion of shoal_kv_get_async: `value`/`size`/`flags` are valid during the callback only
 *  (when status is SHOAL_OK). */
typedef void (*shoal_kv_get_cb)(void* user, int status, const void* value, size_t size, uint32_t flags,
                                const char* error);

/** Opens a client of `servers`, a comma-separated list of "host:port" or "host:port:weight"
 *  entries with numeric addresses ("10.0.0.7:11211,[::1]:11212"), on shard `shard` of `rt`.
 *  An entry written "rdma://host:port" speaks shoal-kv's native RDMA protocol to its
 *  --rdma-port (the runtime must have been started with `rdma` set); others the memcached text
 *  protocol over TCP.
 *  Connections are made on first use, so a server that is down fails the first request to it,
 *  not this call. `timeout_ms` bounds connecting and each request (0: no request timeout). */
SHOAL_C_API int shoal_kv_open(shoal_runtime* rt, const char* servers, unsigned shard, unsigned timeout_ms,
                              shoal_kv** out);
/** Lets requests in flight finish and closes the connections; later calls return SHOAL_ECLOSED.
 *  Idempotent. */
SHOAL_C_API int shoal_kv_close(shoal_kv* kv);
/** Closes `kv` if open and frees it. NULL is ignored. */
SHOAL_C_API void shoal_kv_destroy(shoal_kv* kv);

/** Stores `value` under `key` (memcached `set`). Keys are 1 to 250 bytes without spaces or
 *  control characters. */
SHOAL_C_API int shoal_kv_set(shoal_kv* kv, const char* key, size_t key_size, const void* value, size_t size,
                             uint32_t flags, int64_t exptime);
/** Stores only if `key` is missing (SHOAL_ENOTSTORED otherwise). */
SHOAL_C_API int shoal_kv_add(shoal_kv* kv, const char* key, size_t key_size, const void* value, size_t size,
                             uint32_t flags, int64_t exptime);
/** Copies the value of `key` into `out` (capacity bytes) and sets `*size` to its length and
 *  `*flags` (either may be NULL). SHOAL_ENOTFOUND when missing; SHOAL_ETOOSMALL when it does not
 *  fit (nothing copied, `*size` tells the size needed). */
SHOAL_C_API int shoal_kv_get(shoal_kv* kv, const char* key, size_t key_size, void* out, size_t capacity,
                             size_t* size, uint32_t* flags);
/** The value of `key` in memory the library allocates (`*data`, free with shoal_free). */
SHOAL_C_API int shoal_kv_get_copy(shoal_kv* kv, const char* key, size_t key_size, void** data, size_t* size,
                                  uint32_t* flags);
/** The values of `count` keys (`keys[i]`, `key_sizes[i]` bytes) into `results[i]`, one request
 *  per server at once. Returns SHOAL_OK when every server answered (missing keys are results
 *  with SHOAL_ENOTFOUND); on an error no result holds memory. */
SHOAL_C_API int shoal_kv_get_many(shoal_kv* kv, size_t count, const char* const* keys,
                                  const size_t* key_sizes, shoal_kv_value* results);
/** Deletes `key`; SHOAL_ENOTFOUND when it did not exist. */
SHOAL_C_API int shoal_kv_delete(shoal_kv* kv, const char* key, size_t key_size);

/** shoal_kv_set without waiting: `done` runs on the client's shard thread when it completes.
 *  Returns SHOAL_OK when the request was handed over (`done` will run exactly once), else an
 *  error code (and `done` never runs). */
SHOAL_C_API int shoal_kv_set_async(shoal_kv* kv, const char* key, size_t key_size, const void* value,
                                   size_t size, uint32_t flags, int64_t exptime, shoal_done_cb done,
                                   void* user);
/** shoal_kv_get without waiting (see shoal_kv_set_async). */
SHOAL_C_API int shoal_kv_get_async(shoal_kv* kv, const char* key, size_t key_size, shoal_kv_get_cb done,
                                   void* user);
/** shoal_kv_delete without waiting (see shoal_kv_set_async). */
SHOAL_C_API int shoal_kv_delete_async(shoal_kv* kv, const char* key, size_t key_size, shoal_done_cb done,
                                      void* user);

#ifdef __cplusplus
}
#endif

#endif /* SHOAL_SHOAL_C_H */
