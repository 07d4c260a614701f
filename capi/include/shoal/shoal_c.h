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
#define SHOAL_C_VERSION_MINOR 9

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
    SHOAL_EUNAVAILABLE = 13, /**< RDMA asked for where there is no usable RDMA device (or the
                                  runtime was started without `rdma`) */
    SHOAL_EQUOTA = 14,       /**< a remote pool refused a lease: this client's quota is used up */
    SHOAL_EWATERMARK = 15,   /**< a remote pool refused a lease: the server's memory is used up */
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

/** One result of shoal_kv_get_many_buffer: where key i's value lies in the buffer. */
typedef struct shoal_kv_placed {
    int status;          /**< SHOAL_OK or SHOAL_ENOTFOUND for this key */
    size_t value_offset; /**< from the buffer's start, inside key i's slot */
    size_t size;         /**< the value's bytes */
    uint32_t flags;      /**< the client flags stored with it */
} shoal_kv_placed;

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
/** Stores only if `key` exists (SHOAL_ENOTSTORED otherwise). shoal_kv_replace, _append, _prepend,
 *  _cas, _gets and _gat: since minor 8. */
SHOAL_C_API int shoal_kv_replace(shoal_kv* kv, const char* key, size_t key_size, const void* value,
                                 size_t size, uint32_t flags, int64_t exptime);
/** Adds `value` after the value of `key`, keeping its flags and exptime (SHOAL_ENOTSTORED when
 *  `key` is missing). */
SHOAL_C_API int shoal_kv_append(shoal_kv* kv, const char* key, size_t key_size, const void* value,
                                size_t size);
/** Adds `value` before the value of `key`; otherwise as shoal_kv_append. */
SHOAL_C_API int shoal_kv_prepend(shoal_kv* kv, const char* key, size_t key_size, const void* value,
                                 size_t size);
/** Stores only if `key` still has the CAS unique `cas_unique` (from shoal_kv_gets): SHOAL_EEXISTS
 *  when the value changed since, SHOAL_ENOTFOUND when it is gone. */
SHOAL_C_API int shoal_kv_cas(shoal_kv* kv, const char* key, size_t key_size, const void* value, size_t size,
                             uint32_t flags, int64_t exptime, uint64_t cas_unique);
/** Copies the value of `key` into `out` (capacity bytes) and sets `*size` to its length and
 *  `*flags` (either may be NULL). SHOAL_ENOTFOUND when missing; SHOAL_ETOOSMALL when it does not
 *  fit (nothing copied, `*size` tells the size needed). */
SHOAL_C_API int shoal_kv_get(shoal_kv* kv, const char* key, size_t key_size, void* out, size_t capacity,
                             size_t* size, uint32_t* flags);
/** shoal_kv_get that also sets `*cas_unique` (may be NULL; set on SHOAL_ETOOSMALL too) to the
 *  version's CAS unique, for shoal_kv_cas. */
SHOAL_C_API int shoal_kv_gets(shoal_kv* kv, const char* key, size_t key_size, void* out, size_t capacity,
                              size_t* size, uint32_t* flags, uint64_t* cas_unique);
/** shoal_kv_gets that also gives `key` the new `exptime` (memcached's gat: one request; into the
 *  past, the value is returned once and expires). Since minor 8. */
SHOAL_C_API int shoal_kv_gat(shoal_kv* kv, const char* key, size_t key_size, int64_t exptime, void* out,
                             size_t capacity, size_t* size, uint32_t* flags, uint64_t* cas_unique);
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
/** Adds `delta` to the decimal number stored at `key` (wrapping at 2^64), the new value in
 *  `*value` (may be NULL); SHOAL_ENOTFOUND when missing, SHOAL_ESERVER when not a number.
 *  shoal_kv_incr, _decr, _touch and _flush_all: since minor 7. */
SHOAL_C_API int shoal_kv_incr(shoal_kv* kv, const char* key, size_t key_size, uint64_t delta,
                              uint64_t* value);
/** Subtracts `delta` (stopping at 0); otherwise as shoal_kv_incr. */
SHOAL_C_API int shoal_kv_decr(shoal_kv* kv, const char* key, size_t key_size, uint64_t delta,
                              uint64_t* value);
/** Gives `key` a new exptime (memcached's rules, as shoal_kv_set's) without fetching it;
 *  SHOAL_ENOTFOUND when it does not exist. */
SHOAL_C_API int shoal_kv_touch(shoal_kv* kv, const char* key, size_t key_size, int64_t exptime);
/** memcached's flush_all on every server of the client: what was stored before now (`delay`
 *  0) or before `delay` (an exptime) becomes invisible then. */
SHOAL_C_API int shoal_kv_flush_all(shoal_kv* kv, int64_t delay);
/** memcached's general `stats` of the server at `server` in the server list (from 0): `*text`
 *  (free with shoal_free) holds one "name value\n" line per statistic, in the server's order,
 *  and `*size` its length. SHOAL_EINVAL when there is no such server. Since minor 8. */
SHOAL_C_API int shoal_kv_stats(shoal_kv* kv, size_t server, char** text, size_t* size);

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
/** shoal_kv_add without waiting (see shoal_kv_set_async): SHOAL_ENOTSTORED to `done` when the key
 *  exists. Since minor 9, as the other _async forms below. */
SHOAL_C_API int shoal_kv_add_async(shoal_kv* kv, const char* key, size_t key_size, const void* value,
                                   size_t size, uint32_t flags, int64_t exptime, shoal_done_cb done,
                                   void* user);
/** shoal_kv_replace without waiting: SHOAL_ENOTSTORED to `done` when the key is missing. */
SHOAL_C_API int shoal_kv_replace_async(shoal_kv* kv, const char* key, size_t key_size, const void* value,
                                       size_t size, uint32_t flags, int64_t exptime, shoal_done_cb done,
                                       void* user);
/** shoal_kv_append without waiting: SHOAL_ENOTSTORED to `done` when the key is missing. */
SHOAL_C_API int shoal_kv_append_async(shoal_kv* kv, const char* key, size_t key_size, const void* value,
                                      size_t size, shoal_done_cb done, void* user);
/** shoal_kv_prepend without waiting: SHOAL_ENOTSTORED to `done` when the key is missing. */
SHOAL_C_API int shoal_kv_prepend_async(shoal_kv* kv, const char* key, size_t key_size, const void* value,
                                       size_t size, shoal_done_cb done, void* user);
/** shoal_kv_cas without waiting: SHOAL_EEXISTS to `done` when the value changed since it was read,
 *  SHOAL_ENOTFOUND when the key is gone. */
SHOAL_C_API int shoal_kv_cas_async(shoal_kv* kv, const char* key, size_t key_size, const void* value,
                                   size_t size, uint32_t flags, int64_t exptime, uint64_t cas_unique,
                                   shoal_done_cb done, void* user);
/** shoal_kv_touch without waiting: SHOAL_ENOTFOUND to `done` when the key is missing. */
SHOAL_C_API int shoal_kv_touch_async(shoal_kv* kv, const char* key, size_t key_size, int64_t exptime,
                                     shoal_done_cb done, void* user);
/** Completion of shoal_kv_incr_async / shoal_kv_decr_async: on SHOAL_OK `value` is the counter's
 *  new value (0 otherwise); `error` as shoal_done_cb's. Since minor 9. */
typedef void (*shoal_kv_count_cb)(void* user, int status, uint64_t value, const char* error);
/** shoal_kv_incr without waiting: SHOAL_ENOTFOUND to `done` when the key is missing, an error
 *  when its value is not a number. */
SHOAL_C_API int shoal_kv_incr_async(shoal_kv* kv, const char* key, size_t key_size, uint64_t delta,
                                    shoal_kv_count_cb done, void* user);
/** shoal_kv_decr without waiting (as shoal_kv_incr_async; it stops at 0). */
SHOAL_C_API int shoal_kv_decr_async(shoal_kv* kv, const char* key, size_t key_size, uint64_t delta,
                                    shoal_kv_count_cb done, void* user);
/** shoal_kv_gat without waiting: the value, given its new exptime, to `done` as
 *  shoal_kv_get_async's. */
SHOAL_C_API int shoal_kv_gat_async(shoal_kv* kv, const char* key, size_t key_size, int64_t exptime,
                                   shoal_kv_get_cb done, void* user);

/* ---------------------------------------------------------------------------------------- */
/* Registered buffers: memory of a shard's registered RDMA pool, usable without a copy by the */
/* ring and remote-pool calls that take a shoal_buffer. Need a runtime started with `rdma`.   */

/** A buffer of registered memory owned by the caller until shoal_buffer_free. Its bytes
 *  (shoal_buffer_data) may be read and written by any thread, but not while a call using the
 *  buffer runs. It belongs to one shard: it can be used only with handles of that shard. */
typedef struct shoal_buffer shoal_buffer;

/** Allocates `size` bytes (1 to the pool's largest buffer, 1 MiB by default) from the registered
 *  pool of `shard`. SHOAL_EUNAVAILABLE when the runtime has no RDMA, SHOAL_ENOMEM when the pool
 *  is exhausted, SHOAL_EINVAL for a bad size or shard. */
SHOAL_C_API int shoal_buffer_alloc(shoal_runtime* rt, unsigned shard, size_t size, shoal_buffer** out);
/** Gives the buffer back. Operations still using it keep its memory until they complete (the
 *  _async forms), so freeing never makes the device write into memory handed out again. After
 *  shoal_runtime_stop every buffer is empty (data NULL, size 0) and only this is left to do.
 *  NULL is ignored. */
SHOAL_C_API void shoal_buffer_free(shoal_buffer* buf);
/** The buffer's bytes (NULL for NULL or once its runtime stopped). */
SHOAL_C_API void* shoal_buffer_data(const shoal_buffer* buf);
/** The number of bytes asked for (0 for NULL or once its runtime stopped). */
SHOAL_C_API size_t shoal_buffer_size(const shoal_buffer* buf);

/* ---------------------------------------------------------------------------------------- */
/* KV calls on registered buffers (since minor 6): over shoal-kv's RDMA protocol the value     */
/* moves between the server and the caller's shoal_buffer without a copy in the library.       */
/* The buffer must belong to the client's shard. Over TCP, and for values the server answers  */
/* inline, the bytes are copied (the calls still work).                                       */

/** The capacity shoal_kv_get_buffer needs for a value of `value_size` bytes under a key of
 *  `key_size` bytes (the whole record an RDMA READ fetches: the value, the key and 72 to 79
 *  bytes). */
SHOAL_C_API size_t shoal_kv_buffer_capacity(size_t key_size, size_t value_size);
/** shoal_kv_set of the `size` bytes at `offset` of `buf`: over RDMA a value too large to travel
 *  in the request is WRITTEN by the device straight from `buf`. Do not change those bytes before
 *  the call returned. SHOAL_EINVAL for a range outside the buffer or another shard's buffer,
 *  SHOAL_ECLOSED for a freed one. */
SHOAL_C_API int shoal_kv_set_buffer(shoal_kv* kv, const char* key, size_t key_size, const shoal_buffer* buf,
                                    size_t offset, size_t size, uint32_t flags, int64_t exptime);
/** Reads the value of `key` into the `capacity` bytes at `offset` of `buf` (nothing outside them
 *  is touched). On SHOAL_OK the value's bytes start at `*value_offset` from the start of the
 *  buffer (over RDMA after the record's header: not at `offset`), `*size` is their number and
 *  `*flags` the value's flags (either of the last two may be NULL). SHOAL_ENOTFOUND when
 *  missing. SHOAL_ETOOSMALL when the range is too small: `*size` is then the capacity needed
 *  (shoal_kv_buffer_capacity over RDMA) and nothing is lost, call again with a larger range. */
SHOAL_C_API int shoal_kv_get_buffer(shoal_kv* kv, const char* key, size_t key_size, shoal_buffer* buf,
                                    size_t offset, size_t capacity, size_t* value_offset, size_t* size,
                                    uint32_t* flags);
/** The values of `count` keys read into `buf` at once (one request per server, a READ per cached
 *  location), without a copy over RDMA: key i's value lies inside the slot of `slot` bytes at
 *  offset i × `slot` (make `slot` shoal_kv_buffer_capacity(longest key, largest value)), where
 *  `results[i]` says. Returns SHOAL_OK when every server answered (missing keys are results with
 *  SHOAL_ENOTFOUND). SHOAL_EINVAL, before anything is sent, for an invalid key or `count` ×
 *  `slot` past the buffer; SHOAL_ETOOSMALL when a value does not fit its slot: `*needed` (may be
 *  NULL) is then the slot size that fits them all, and nothing is lost. Since minor 8. */
SHOAL_C_API int shoal_kv_get_many_buffer(shoal_kv* kv, size_t count, const char* const* keys,
                                         const size_t* key_sizes, shoal_buffer* buf, size_t slot,
                                         shoal_kv_placed* results, size_t* needed);
/** Completion of shoal_kv_get_buffer_async: on SHOAL_OK the value lies at `value_offset` in the
 *  buffer, `size` bytes; on SHOAL_ETOOSMALL `size` is the capacity needed. */
typedef void (*shoal_kv_get_buffer_cb)(void* user, int status, size_t value_offset, size_t size,
                                       uint32_t flags, const char* error);
/** shoal_kv_set_buffer without waiting: the buffer's memory is held until `done` ran (freeing
 *  the buffer meanwhile is safe); do not change those bytes before then. As shoal_kv_set_async
 *  otherwise. */
SHOAL_C_API int shoal_kv_set_buffer_async(shoal_kv* kv, const char* key, size_t key_size,
                                          const shoal_buffer* buf, size_t offset, size_t size, uint32_t flags,
                                          int64_t exptime, shoal_done_cb done, void* user);
/** shoal_kv_get_buffer without waiting: the buffer's memory is held until `done` ran; its bytes
 *  may be read once `done` reported SHOAL_OK. As shoal_kv_get_async otherwise. */
SHOAL_C_API int shoal_kv_get_buffer_async(shoal_kv* kv, const char* key, size_t key_size, shoal_buffer* buf,
                                          size_t offset, size_t capacity, shoal_kv_get_buffer_cb done,
                                          void* user);

/* ---------------------------------------------------------------------------------------- */
/* Ring channel: one producer writes messages straight into a consumer's memory with RDMA      */
/* WRITE_WITH_IMM (docs/rdma.md, "Ring channel"). Need a runtime started with `rdma`.          */

/** Bytes of a ring's descriptor (what a producer needs besides the consumer's address). */
#define SHOAL_RING_DESCRIPTOR_SIZE 32

/** The receiving end: a ring in registered memory of one shard, listening for its producer. */
typedef struct shoal_ring_consumer shoal_ring_consumer;
/** The sending end, connected to one consumer. */
typedef struct shoal_ring_producer shoal_ring_producer;

/** Completion of shoal_ring_receive_async: the message's bytes are valid during the callback
 *  only (when status is SHOAL_OK); its space goes back to the producer when the callback returns. */
typedef void (*shoal_ring_receive_cb)(void* user, int status, const void* data, size_t size,
                                      const char* error);

/** Opens a consumer on `shard` with a ring of `capacity` data bytes (a power of two, 64 B to
 *  1 GiB) and listens on `address` ("ip:port" of the RDMA device; port 0 picks one) for its
 *  producer. A producer that connects again after its connection broke resumes the ring; a
 *  second producer while one is connected is turned away. */
SHOAL_C_API int shoal_ring_consumer_open(shoal_runtime* rt, unsigned shard, const char* address,
                                         size_t capacity, shoal_ring_consumer** out);
/** Copies the ring's descriptor (SHOAL_RING_DESCRIPTOR_SIZE bytes) into `out` (`capacity` bytes;
 *  SHOAL_ETOOSMALL when smaller). Plain bytes: send them to the producer any way you like. */
SHOAL_C_API int shoal_ring_consumer_descriptor(shoal_ring_consumer* c, void* out, size_t capacity,
                                               size_t* size);
/** The address listened on ("ip:port", with the port picked), NUL-terminated into `out`
 *  (SHOAL_ETOOSMALL when `capacity` is too small). */
SHOAL_C_API int shoal_ring_consumer_address(shoal_ring_consumer* c, char* out, size_t capacity);
/** The largest message the ring takes (0 for NULL). */
SHOAL_C_API size_t shoal_ring_consumer_max_message(const shoal_ring_consumer* c);
/** Waits up to `timeout_ms` (negative: no limit; 0: only what arrived) for the next message and
 *  copies it into `out`; its space goes back to the producer. SHOAL_ETIMEDOUT when none came;
 *  SHOAL_ETOOSMALL when it does not fit (`*size` tells its size; it stays the next message);
 *  SHOAL_ECONNECTION once after the producer's connection broke and every message it announced
 *  was received (later receives wait for a producer that connects again). One receive at a
 *  time per consumer (SHOAL_ESTATE otherwise). */
SHOAL_C_API int shoal_ring_receive(shoal_ring_consumer* c, void* out, size_t capacity, size_t* size,
                                   int timeout_ms);
/** Like shoal_ring_receive, without a copy: `*data` points into the ring and stays valid until
 *  shoal_ring_release or the next receive (which releases it). The ring is remote-writable
 *  memory: parse untrusted content from a copy. */
SHOAL_C_API int shoal_ring_receive_view(shoal_ring_consumer* c, const void** data, size_t* size,
                                        int timeout_ms);
/** Gives the space of the message last viewed back to the producer (nothing when none is held). */
SHOAL_C_API int shoal_ring_release(shoal_ring_consumer* c);
/** Waits for the next message without blocking the caller: `done` runs once on the consumer's
 *  shard thread (see shoal_ring_receive_cb), with no time limit (closing the consumer ends it
 *  with SHOAL_ECLOSED). Returns SHOAL_OK when handed over (`done` will run exactly once). */
SHOAL_C_API int shoal_ring_receive_async(shoal_ring_consumer* c, shoal_ring_receive_cb done, void* user);
/** Stops listening, closes the producer's connection and revokes the ring; a waiting receive
 *  fails with SHOAL_ECLOSED. Idempotent. */
SHOAL_C_API int shoal_ring_consumer_close(shoal_ring_consumer* c);
/** Closes `c` if open and frees it. NULL is ignored. */
SHOAL_C_API void shoal_ring_consumer_destroy(shoal_ring_consumer* c);

/** Connects from `shard` to the consumer listening at `address` and opens a producer on its
 *  ring `descriptor` (`size` bytes, from shoal_ring_consumer_descriptor). `timeout_ms` bounds
 *  the connection's setup (0: the default of 10 s). SHOAL_EINVAL for descriptor garbage,
 *  SHOAL_ECONNECTION when nobody listens or the ring cannot be read. */
SHOAL_C_API int shoal_ring_producer_open(shoal_runtime* rt, unsigned shard, const char* address,
                                         const void* descriptor, size_t size, unsigned timeout_ms,
                                         shoal_ring_producer** out);
/** The largest message the ring takes (0 for NULL). */
SHOAL_C_API size_t shoal_ring_producer_max_message(const shoal_ring_producer* p);
/** Messages the consumer had been announced (since the ring was created) when the producer
 *  opened: exactly those reached the ring. A producer restarted after a crash, also in a new
 *  process, resends from there (the sequence number of its first message when messages are
 *  numbered from 0). 0 for NULL. Since minor 4. */
SHOAL_C_API uint64_t shoal_ring_producer_resume_record(const shoal_ring_producer* p);
/** Sends `size` bytes (0 to the largest message; SHOAL_EINVAL beyond it): returns once they are
 *  in the consumer's memory. A full ring makes it wait until the consumer releases space (or
 *  the connection breaks: SHOAL_ECONNECTION, or the producer is closed: SHOAL_ECLOSED). */
SHOAL_C_API int shoal_ring_send(shoal_ring_producer* p, const void* data, size_t size);
/** Sends `size` bytes at `offset` of `buf` (a buffer of the producer's shard). */
SHOAL_C_API int shoal_ring_send_buffer(shoal_ring_producer* p, const shoal_buffer* buf, size_t offset,
                                       size_t size);
/** shoal_ring_send without waiting: the bytes are copied before it returns; `done` runs once on
 *  the producer's shard thread when they are in the consumer's memory (or the send failed).
 *  Messages sent from one thread arrive in the order of the calls. */
SHOAL_C_API int shoal_ring_send_async(shoal_ring_producer* p, const void* data, size_t size,
                                      shoal_done_cb done, void* user);
/** shoal_ring_send_buffer without waiting and without a copy: the buffer's memory is held until
 *  `done` ran (the caller may free the handle at once; it must not write the bytes meanwhile). */
SHOAL_C_API int shoal_ring_send_buffer_async(shoal_ring_producer* p, const shoal_buffer* buf, size_t offset,
                                             size_t size, shoal_done_cb done, void* user);
/** Sends `count` messages (`data[i]`, `sizes[i]` bytes; `data[i]` may be NULL when its size is
 *  0) in order, in one hop to the producer's shard: they are written into the ring's staging
 *  area together and share doorbells (one per batch instead of one per message). Returns once
 *  all are in the consumer's memory. A message larger than the ring fails the whole call with
 *  SHOAL_EINVAL before anything is sent; a full ring makes it wait as shoal_ring_send does. On
 *  SHOAL_ECONNECTION (or SHOAL_ECLOSED by a close meanwhile) a prefix of the messages may have
 *  arrived: a new producer's shoal_ring_producer_resume_record says how many. Since minor 5. */
SHOAL_C_API int shoal_ring_send_many(shoal_ring_producer* p, size_t count, const void* const* data,
                                     const size_t* sizes);
/** shoal_ring_send_many without waiting: every message is copied before it returns; `done` runs
 *  once on the producer's shard thread when all are in the consumer's memory (or the send
 *  failed). Errors of the arguments are returned here (and `done` never runs). Since minor 5. */
SHOAL_C_API int shoal_ring_send_many_async(shoal_ring_producer* p, size_t count, const void* const* data,
                                           const size_t* sizes, shoal_done_cb done, void* user);
/** Closes the connection (sends still waiting for room fail with SHOAL_ECLOSED). Idempotent. */
SHOAL_C_API int shoal_ring_producer_close(shoal_ring_producer* p);
/** Closes `p` if open and frees it. NULL is ignored. */
SHOAL_C_API void shoal_ring_producer_destroy(shoal_ring_producer* p);

/* ---------------------------------------------------------------------------------------- */
/* Remote memory pool: lease memory of a pool server and read/write it with one-sided RDMA    */
/* (docs/rdma.md, "Remote memory pool"). Need a runtime started with `rdma`.                  */

/** A connection to a pool server (a control connection and two one-sided ones). */
typedef struct shoal_pool shoal_pool;
/** A region leased from a pool server; its bytes are read and written at offsets. */
typedef struct shoal_lease shoal_lease;

/** Completion of shoal_pool_lease_async: on SHOAL_OK `lease` is a new lease owned by the caller
 *  (free it with shoal_lease_destroy, from any thread), NULL otherwise. */
typedef void (*shoal_lease_cb)(void* user, int status, shoal_lease* lease, const char* error);

/** Connects from `shard` to the pool server at `address` ("ip:port"); `timeout_ms` bounds the
 *  connections' setup (0: 10 s). */
SHOAL_C_API int shoal_pool_connect(shoal_runtime* rt, unsigned shard, const char* address,
                                   unsigned timeout_ms, shoal_pool** out);
/** Leases `size` bytes. SHOAL_EQUOTA when this client's quota, SHOAL_EWATERMARK when the
 *  server's memory does not allow it, SHOAL_EINVAL for 0 or more than the server's largest
 *  lease; the pool stays usable after each. */
SHOAL_C_API int shoal_pool_lease(shoal_pool* pool, size_t size, shoal_lease** out);
/** shoal_pool_lease without waiting: `done` runs once on the pool's shard thread with the lease
 *  or the error (SHOAL_EQUOTA, SHOAL_EWATERMARK, SHOAL_ECONNECTION, ...). Returns SHOAL_OK when
 *  handed over (`done` will run exactly once), else an error code (and `done` never runs):
 *  SHOAL_EINVAL for a NULL pool or callback or a size of 0, SHOAL_ECLOSED for a closed pool or
 *  a stopped runtime. */
SHOAL_C_API int shoal_pool_lease_async(shoal_pool* pool, size_t size, shoal_lease_cb done, void* user);
/** Closes the connections; the server takes every lease back. Leases of it are closed with it. */
SHOAL_C_API int shoal_pool_close(shoal_pool* pool);
/** Closes `pool` if open and frees it (leases must still be destroyed). NULL is ignored. */
SHOAL_C_API void shoal_pool_destroy(shoal_pool* pool);

/** The leased bytes (0 for NULL). */
SHOAL_C_API size_t shoal_lease_size(const shoal_lease* lease);
/** Writes `size` bytes of `data` at `offset` of the lease (SHOAL_EINVAL past its end). */
SHOAL_C_API int shoal_lease_write(shoal_lease* lease, uint64_t offset, const void* data, size_t size);
/** Reads `size` bytes at `offset` of the lease into `out`. */
SHOAL_C_API int shoal_lease_read(shoal_lease* lease, uint64_t offset, void* out, size_t size);
/** Writes `size` bytes at `buf_offset` of `buf` (a buffer of the pool's shard) to `offset` of
 *  the lease, without a copy. */
SHOAL_C_API int shoal_lease_write_buffer(shoal_lease* lease, uint64_t offset, const shoal_buffer* buf,
                                         size_t buf_offset, size_t size);
/** Reads `size` bytes at `offset` of the lease into `buf` at `buf_offset`, without a copy. */
SHOAL_C_API int shoal_lease_read_buffer(shoal_lease* lease, uint64_t offset, shoal_buffer* buf,
                                        size_t buf_offset, size_t size);
/** shoal_lease_write without waiting: the bytes are copied before it returns; `done` runs once
 *  on the pool's shard thread when they are in the server's memory (or the write failed).
 *  Bad arguments and a closed lease are returned here (and `done` never runs), as for
 *  shoal_pool_lease_async. */
SHOAL_C_API int shoal_lease_write_async(shoal_lease* lease, uint64_t offset, const void* data, size_t size,
                                        shoal_done_cb done, void* user);
/** shoal_lease_read without waiting: `out` is written on the shard thread and must stay valid
 *  (and untouched) until `done` ran; its bytes are complete when `done` reports SHOAL_OK. */
SHOAL_C_API int shoal_lease_read_async(shoal_lease* lease, uint64_t offset, void* out, size_t size,
                                       shoal_done_cb done, void* user);
/** shoal_lease_write_buffer without waiting and without a copy: the buffer's memory is held
 *  until `done` ran (the caller may free the handle at once; it must not write the bytes
 *  meanwhile). */
SHOAL_C_API int shoal_lease_write_buffer_async(shoal_lease* lease, uint64_t offset, const shoal_buffer* buf,
                                               size_t buf_offset, size_t size, shoal_done_cb done,
                                               void* user);
/** shoal_lease_read_buffer without waiting: the buffer's memory is held until `done` ran; its
 *  bytes must not be touched before. */
SHOAL_C_API int shoal_lease_read_buffer_async(shoal_lease* lease, uint64_t offset, shoal_buffer* buf,
                                              size_t buf_offset, size_t size, shoal_done_cb done, void* user);
/** Gives the region back to the server (later reads and writes: SHOAL_ECLOSED). Idempotent. */
SHOAL_C_API int shoal_lease_release(shoal_lease* lease);
/** shoal_lease_release without waiting: the lease is closed at once (later calls return
 *  SHOAL_ECLOSED), `done` runs on the pool's shard thread once the region was given back
 *  (SHOAL_OK also when it was released already). SHOAL_ECLOSED (and `done` never runs) once the
 *  runtime stopped. */
SHOAL_C_API int shoal_lease_release_async(shoal_lease* lease, shoal_done_cb done, void* user);
/** Releases `lease` if held and frees it. NULL is ignored. */
SHOAL_C_API void shoal_lease_destroy(shoal_lease* lease);

#ifdef __cplusplus
}
#endif

#endif /* SHOAL_SHOAL_C_H */
