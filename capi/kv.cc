// shoal_kv_*: kv::client behind the C ABI. The client lives on one shard; every call is handed
// to that shard and, for the blocking forms, waited for on the caller's thread.

#include "capi/async.hh"
#include "capi/buffer.hh"
#include "capi/runtime.hh"
#include "capi/shard_handle.hh"
#include "capi/status.hh"
#include "kv/client/client.hh"
#include "kv/client/internal/client_transport.hh"
#include "kv/client/server_list.hh"
#include "shoal/shoal_c.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace shoal;
using namespace shoal::capi;

namespace {

/// A client and the shard it lives on. `client` is touched only on that shard; it is null once
/// closed, so a call queued behind the close fails instead of using a destroyed client.
class kv_state final : public shard_handle {
public:
    using shard_handle::shard_handle;

    /// On the shard: the client, or a client_error when closed.
    kv::client& client() {
        if (!_client) {
            throw kv::client_error(kv::client_errc::bad_request, 0, "the KV client is closed");
        }
        return *_client;
    }

    /// Creates the client on its shard (blocking).
    void open(kv::client_config cfg) {
        auto f = _rt->engine().submit(_shard, [this, cfg = std::move(cfg)]() mutable {
            _client = std::make_unique<kv::client>(std::move(cfg));
        });
        f.get();
    }

private:
    future<> close_on_shard() noexcept override {
        if (!_client) {
            return make_ready_future<>();
        }
        return _client->close().then_wrapped([this](future<> done) {
            done.ignore_ready_future();
            _client.reset();
        });
    }

    // The engine stopped first: it destroyed nothing of ours; the client dies with it unclosed,
    // which only frees memory.
    void abandon() noexcept override { (void)_client.release(); }

    std::unique_ptr<kv::client> _client;
};

/// The handle `kv`, checked: a status other than SHOAL_OK when it cannot take a call.
int check(shoal_kv* kv, const char* what, bool blocking);

} // namespace

/// The C handle.
struct shoal_kv {
    std::shared_ptr<kv_state> state;
};

namespace {

int check(shoal_kv* kv, const char* what, bool blocking) {
    return check_handle(kv ? kv->state.get() : nullptr, what, "KV client", blocking);
}

int check_key(const char* key, size_t key_size, const char* what) {
    if (!key && key_size) {
        return fail(SHOAL_EINVAL, std::string(what) + ": NULL key");
    }
    try {
        kv::check_key(std::string_view(key ? key : "", key_size));
    } catch (const std::exception& e) {
        return fail(SHOAL_EINVAL, std::string(what) + ": " + e.what());
    }
    return SHOAL_OK;
}

/// `check` of a blocking call, then `check_key`: the first failure's status, else SHOAL_OK.
int check_blocking_key(shoal_kv* kv, const char* key, size_t key_size, const char* what) {
    int rc = check(kv, what, true);
    return rc != SHOAL_OK ? rc : check_key(key, key_size, what);
}

/// A storage command's outcome as a status and, when it is not SHOAL_OK, the sentence saying
/// why (named `what`).
async_result<int> store_result(kv::store_outcome outcome, const char* what) {
    switch (outcome) {
    case kv::store_outcome::stored:
        return {};
    case kv::store_outcome::not_stored:
        return {SHOAL_ENOTSTORED, std::string(what) + ": not stored", 0};
    case kv::store_outcome::exists:
        return {SHOAL_EEXISTS, std::string(what) + ": the value changed since it was read", 0};
    case kv::store_outcome::not_found:
        return {SHOAL_ENOTFOUND, std::string(what) + ": no such key", 0};
    }
    return {SHOAL_EINTERNAL, std::string(what) + ": unknown outcome", 0};
}

int store_status(kv::store_outcome outcome, const char* what) {
    async_result<int> r = store_result(outcome, what);
    return r.status == SHOAL_OK ? int(SHOAL_OK) : fail(r.status, r.error);
}

/// `bytes` in memory the caller frees with shoal_free (at least one byte, so that an empty value
/// is not NULL), or NULL when out of memory.
void* malloc_copy(std::string_view bytes) noexcept {
    void* p = std::malloc(bytes.empty() ? 1 : bytes.size());
    if (p && !bytes.empty()) {
        std::memcpy(p, bytes.data(), bytes.size());
    }
    return p;
}

/// Checks the `count` keys of a multi-key call and copies them into `out`: SHOAL_OK, or the
/// status of the first one refused.
int collect_keys(size_t count, const char* const* keys, const size_t* key_sizes, const char* what,
                 std::vector<std::string>& out) {
    out.reserve(count);
    for (size_t i = 0; i < count; ++i) {
        if (int rc = check_key(keys[i], key_sizes[i], what); rc != SHOAL_OK) {
            return rc;
        }
        out.emplace_back(keys[i], key_sizes[i]);
    }
    return SHOAL_OK;
}

using kv::internal::store_op;

/// `op` through `c`'s typed calls (append and prepend keep the stored flags and exptime).
future<kv::store_outcome> run_store(kv::client& c, store_op op, std::string_view k, std::string_view v,
                                    uint32_t flags, int64_t exptime, uint64_t cas_unique) {
    switch (op) {
    case store_op::add:
        return c.add(k, v, flags, exptime);
    case store_op::replace:
        return c.replace(k, v, flags, exptime);
    case store_op::cas:
        return c.cas(k, v, cas_unique, flags, exptime);
    case store_op::append:
        return c.append(k, v);
    case store_op::prepend:
        return c.prepend(k, v);
    case store_op::set:
        break;
    }
    return c.set(k, v, flags, exptime);
}

/// A blocking storage command (`cas_unique` is read by `cas` alone).
int store(shoal_kv* kv, store_op op, const char* key, size_t key_size, const void* value, size_t size,
          uint32_t flags, int64_t exptime, uint64_t cas_unique, const char* what) {
    return guarded([&] {
        if (int rc = check_blocking_key(kv, key, key_size, what); rc != SHOAL_OK) {
            return rc;
        }
        if (!value && size) {
            return fail(SHOAL_EINVAL, std::string(what) + ": NULL value");
        }
        auto& st = *kv->state;
        std::string_view k(key, key_size);
        std::string_view v(value ? static_cast<const char*>(value) : "", size);
        auto f = st.runtime().engine().submit(st.shard(), [&st, op, k, v, flags, exptime, cas_unique] {
            return run_store(st.client(), op, k, v, flags, exptime, cas_unique);
        });
        return store_status(f.get(), what);
    });
}

/// What an _async call's work yields on the shard (a get's value).
using async_outcome = async_result<kv::fetched_value>;

/// Hands `fn` (returning a future<async_outcome>) to `kv`'s shard and reports its outcome to
/// `report(status, error text or NULL, outcome or NULL)` there.
template <typename Fn, typename Report>
int start_async(shoal_kv* kv, const char* what, Fn fn, Report report) {
    return guarded([&] {
        if (int rc = check(kv, what, false); rc != SHOAL_OK) {
            return rc;
        }
        return capi::start_async(kv->state, what, std::move(fn), std::move(report));
    });
}

/// A blocking call about one key that says whether the key was there (`call(client, key)`
/// resolves with that bool): SHOAL_OK, or SHOAL_ENOTFOUND naming `what`.
template <typename Call>
int found_or_not(shoal_kv* kv, const char* key, size_t key_size, const char* what, Call call) {
    return guarded([&] {
        if (int rc = check_blocking_key(kv, key, key_size, what); rc != SHOAL_OK) {
            return rc;
        }
        auto& st = *kv->state;
        std::string_view k(key, key_size);
        // `call` lives on this thread's stack, which blocks in `get` until the shard is done.
        auto f = st.runtime().engine().submit(st.shard(), [&st, k, &call] { return call(st.client(), k); });
        return f.get() ? int(SHOAL_OK) : fail(SHOAL_ENOTFOUND, std::string(what) + ": no such key");
    });
}

/// The start every _async call about one key shares: the key checked, the callback given (else
/// SHOAL_EINVAL, and it never runs), then `fn(state, key)` handed to the client's shard with
/// `report` (see capi::start_async). The key is copied: the caller's may go once this returns.
template <typename Fn, typename Report>
int start_keyed_async(shoal_kv* kv, const char* key, size_t key_size, bool has_callback, const char* what,
                      Fn fn, Report report) {
    return guarded([&] {
        if (int rc = check_key(key, key_size, what); rc != SHOAL_OK) {
            return rc;
        }
        if (!has_callback) {
            return fail(SHOAL_EINVAL, std::string(what) + ": NULL callback");
        }
        return start_async(
            kv, what,
            [k = std::string(key, key_size), fn = std::move(fn)](kv_state& st) { return fn(st, k); },
            std::move(report));
    });
}

/// `done(user, status, error)` of a call that yields no value.
auto report_done(shoal_done_cb done, void* user) {
    return [done, user](int status, const char* error, async_result<int>*) { done(user, status, error); };
}

/// A storage command without waiting: `done(user, status, error)` runs on the client's shard.
int store_async(shoal_kv* kv, store_op op, const char* key, size_t key_size, const void* value, size_t size,
                uint32_t flags, int64_t exptime, uint64_t cas_unique, shoal_done_cb done, void* user,
                const char* what) {
    if (!value && size) {
        return guarded([&] { return fail(SHOAL_EINVAL, std::string(what) + ": NULL value"); });
    }
    return start_keyed_async(
        kv, key, key_size, done != nullptr, what,
        [v = std::string(static_cast<const char*>(value ? value : ""), size), op, flags, exptime, cas_unique,
         what](kv_state& st, const std::string& k) {
            return run_store(st.client(), op, k, v, flags, exptime, cas_unique)
                .then([what](kv::store_outcome o) { return store_result(o, what); });
        },
        report_done(done, user));
}

/// A call about one key that says whether the key was there (`call(client, key)` resolves with
/// that bool), without waiting: SHOAL_OK or SHOAL_ENOTFOUND to `done(user, status, error)`.
template <typename Call>
int found_async(shoal_kv* kv, const char* key, size_t key_size, shoal_done_cb done, void* user,
                const char* what, Call call) {
    return start_keyed_async(
        kv, key, key_size, done != nullptr, what,
        [call = std::move(call), what](kv_state& st, const std::string& k) {
            return call(st.client(), k).then([what](bool found) {
                return found ? async_result<int>{}
                             : async_result<int>{SHOAL_ENOTFOUND, std::string(what) + ": no such key", 0};
            });
        },
        report_done(done, user));
}

/// incr (`incr`) or decr without waiting: the counter's new value to `done`.
int delta_async(shoal_kv* kv, bool incr, const char* key, size_t key_size, uint64_t delta,
                shoal_kv_count_cb done, void* user, const char* what) {
    return start_keyed_async(
        kv, key, key_size, done != nullptr, what,
        [incr, delta, what](kv_state& st, const std::string& k) {
            return (incr ? st.client().incr(k, delta) : st.client().decr(k, delta))
                .then([what](std::optional<uint64_t> n) {
                    return n ? async_result<uint64_t>{SHOAL_OK, {}, *n}
                             : async_result<uint64_t>{SHOAL_ENOTFOUND, std::string(what) + ": no such key",
                                                      0};
                });
        },
        [done, user](int status, const char* error, async_result<uint64_t>* r) {
            done(user, status, status == SHOAL_OK && r ? r->value : 0, error);
        });
}

/// A get (with `touch`: a gat) without waiting: the value, valid during the callback, to `done`.
int get_async(shoal_kv* kv, const char* key, size_t key_size, std::optional<int64_t> touch,
              shoal_kv_get_cb done, void* user, const char* what) {
    return start_keyed_async(
        kv, key, key_size, done != nullptr, what,
        [touch, what](kv_state& st, const std::string& k) {
            return (touch ? st.client().gat(k, *touch) : st.client().get(k))
                .then([what](std::optional<kv::fetched_value> v) {
                    if (!v) {
                        return async_outcome{SHOAL_ENOTFOUND, std::string(what) + ": no such key", {}};
                    }
                    return async_outcome{SHOAL_OK, {}, std::move(*v)};
                });
        },
        [done, user](int status, const char* error, async_outcome* result) {
            if (status == SHOAL_OK && result) {
                const auto& v = result->value;
                done(user, status, v.data.data(), v.data.size(), v.flags, nullptr);
            } else {
                done(user, status, nullptr, 0, 0, error);
            }
        });
}

} // namespace

extern "C" {

int shoal_kv_open(shoal_runtime* rt, const char* servers, unsigned shard, unsigned timeout_ms,
                  shoal_kv** out) {
    return guarded([&] {
        if (!out) {
            return fail(SHOAL_EINVAL, "shoal_kv_open: out is NULL");
        }
        *out = nullptr;
        if (int rc = check_shard(rt, shard, "shoal_kv_open"); rc != SHOAL_OK) {
            return rc;
        }
        if (!servers) {
            return fail(SHOAL_EINVAL, "shoal_kv_open: NULL server list");
        }
        check_blocking_allowed();
        kv::client_config cfg;
        cfg.servers = kv::parse_server_list(servers);
        if (timeout_ms) {
            cfg.connect_timeout = std::chrono::milliseconds(timeout_ms);
            cfg.request_timeout = std::chrono::milliseconds(timeout_ms);
        }
        auto st = std::make_shared<kv_state>(rt->state, shard);
        st->open(std::move(cfg));
        if (int rc = track_opened(*rt->state, st, "shoal_kv_open"); rc != SHOAL_OK) {
            return rc;
        }
        *out = new shoal_kv{std::move(st)};
        return int(SHOAL_OK);
    });
}

int shoal_kv_close(shoal_kv* kv) {
    return close_handle(kv ? kv->state.get() : nullptr, "shoal_kv_close", "KV client");
}

void shoal_kv_destroy(shoal_kv* kv) {
    if (kv) {
        close_for_destroy(*kv->state);
        delete kv;
    }
}

int shoal_kv_set(shoal_kv* kv, const char* key, size_t key_size, const void* value, size_t size,
                 uint32_t flags, int64_t exptime) {
    return store(kv, store_op::set, key, key_size, value, size, flags, exptime, 0, "shoal_kv_set");
}

int shoal_kv_add(shoal_kv* kv, const char* key, size_t key_size, const void* value, size_t size,
                 uint32_t flags, int64_t exptime) {
    return store(kv, store_op::add, key, key_size, value, size, flags, exptime, 0, "shoal_kv_add");
}

int shoal_kv_replace(shoal_kv* kv, const char* key, size_t key_size, const void* value, size_t size,
                     uint32_t flags, int64_t exptime) {
    return store(kv, store_op::replace, key, key_size, value, size, flags, exptime, 0, "shoal_kv_replace");
}

int shoal_kv_append(shoal_kv* kv, const char* key, size_t key_size, const void* value, size_t size) {
    return store(kv, store_op::append, key, key_size, value, size, 0, 0, 0, "shoal_kv_append");
}

int shoal_kv_prepend(shoal_kv* kv, const char* key, size_t key_size, const void* value, size_t size) {
    return store(kv, store_op::prepend, key, key_size, value, size, 0, 0, 0, "shoal_kv_prepend");
}

int shoal_kv_cas(shoal_kv* kv, const char* key, size_t key_size, const void* value, size_t size,
                 uint32_t flags, int64_t exptime, uint64_t cas_unique) {
    return store(kv, store_op::cas, key, key_size, value, size, flags, exptime, cas_unique, "shoal_kv_cas");
}

namespace {

/// A blocking get: the value (nullopt when missing) or a status set by a failure.
std::optional<kv::fetched_value> get_value(shoal_kv* kv, const char* key, size_t key_size, const char* what,
                                           int& rc, std::optional<int64_t> touch = std::nullopt) {
    rc = check(kv, what, true);
    if (rc == SHOAL_OK) {
        rc = check_key(key, key_size, what);
    }
    if (rc != SHOAL_OK) {
        return std::nullopt;
    }
    auto& st = *kv->state;
    std::string_view k(key, key_size);
    auto f = st.runtime().engine().submit(
        st.shard(), [&st, k, touch] { return touch ? st.client().gat(k, *touch) : st.client().get(k); });
    auto v = f.get();
    if (!v) {
        rc = fail(SHOAL_ENOTFOUND, std::string(what) + ": no such key");
    }
    return v;
}

/// shoal_kv_get, _gets and _gat (with `touch`): the value copied into `out`, its size, flags and
/// CAS unique reported where asked (NULL: not wanted).
int get_into_caller(shoal_kv* kv, const char* key, size_t key_size, void* out, size_t capacity, size_t* size,
                    uint32_t* flags, uint64_t* cas_unique, const char* what,
                    std::optional<int64_t> touch = std::nullopt) {
    return guarded([&] {
        if (!out && capacity) {
            return fail(SHOAL_EINVAL, std::string(what) + ": NULL output buffer");
        }
        int rc;
        auto v = get_value(kv, key, key_size, what, rc, touch);
        if (rc != SHOAL_OK) {
            return rc;
        }
        if (size) {
            *size = v->data.size();
        }
        if (flags) {
            *flags = v->flags;
        }
        if (cas_unique) {
            *cas_unique = v->cas;
        }
        if (v->data.size() > capacity) {
            return fail(SHOAL_ETOOSMALL, std::string(what) + ": the value has " +
                                             std::to_string(v->data.size()) + " bytes, the buffer " +
                                             std::to_string(capacity));
        }
        if (!v->data.empty()) {
            std::memcpy(out, v->data.data(), v->data.size());
        }
        return int(SHOAL_OK);
    });
}

} // namespace

int shoal_kv_get(shoal_kv* kv, const char* key, size_t key_size, void* out, size_t capacity, size_t* size,
                 uint32_t* flags) {
    return get_into_caller(kv, key, key_size, out, capacity, size, flags, nullptr, "shoal_kv_get");
}

int shoal_kv_gets(shoal_kv* kv, const char* key, size_t key_size, void* out, size_t capacity, size_t* size,
                  uint32_t* flags, uint64_t* cas_unique) {
    return get_into_caller(kv, key, key_size, out, capacity, size, flags, cas_unique, "shoal_kv_gets");
}

int shoal_kv_gat(shoal_kv* kv, const char* key, size_t key_size, int64_t exptime, void* out, size_t capacity,
                 size_t* size, uint32_t* flags, uint64_t* cas_unique) {
    return get_into_caller(kv, key, key_size, out, capacity, size, flags, cas_unique, "shoal_kv_gat",
                           exptime);
}

int shoal_kv_get_copy(shoal_kv* kv, const char* key, size_t key_size, void** data, size_t* size,
                      uint32_t* flags) {
    return guarded([&] {
        if (!data || !size) {
            return fail(SHOAL_EINVAL, "shoal_kv_get_copy: NULL data or size");
        }
        *data = nullptr;
        *size = 0;
        int rc;
        auto v = get_value(kv, key, key_size, "shoal_kv_get_copy", rc);
        if (rc != SHOAL_OK) {
            return rc;
        }
        void* p = malloc_copy(v->data);
        if (!p) {
            return fail(SHOAL_ENOMEM, "shoal_kv_get_copy: out of memory");
        }
        *data = p;
        *size = v->data.size();
        if (flags) {
            *flags = v->flags;
        }
        return int(SHOAL_OK);
    });
}

int shoal_kv_get_many(shoal_kv* kv, size_t count, const char* const* keys, const size_t* key_sizes,
                      shoal_kv_value* results) {
    return guarded([&] {
        if (count && (!keys || !key_sizes || !results)) {
            return fail(SHOAL_EINVAL, "shoal_kv_get_many: NULL keys, sizes or results");
        }
        if (int rc = check(kv, "shoal_kv_get_many", true); rc != SHOAL_OK) {
            return rc;
        }
        std::vector<std::string> wanted;
        if (int rc = collect_keys(count, keys, key_sizes, "shoal_kv_get_many", wanted); rc != SHOAL_OK) {
            return rc;
        }
        for (size_t i = 0; i < count; ++i) {
            results[i] = shoal_kv_value{SHOAL_ENOTFOUND, nullptr, 0, 0};
        }
        auto& st = *kv->state;
        auto f = st.runtime().engine().submit(st.shard(), [&st, wanted = std::move(wanted)]() mutable {
            return st.client().get_many(std::move(wanted));
        });
        auto values = f.get();
        for (size_t i = 0; i < count; ++i) {
            if (!values[i]) {
                continue;
            }
            void* p = malloc_copy(values[i]->data);
            if (!p) {
                for (size_t j = 0; j < i; ++j) {
                    shoal_free(results[j].data);
                    results[j] = shoal_kv_value{SHOAL_ENOTFOUND, nullptr, 0, 0};
                }
                return fail(SHOAL_ENOMEM, "shoal_kv_get_many: out of memory");
            }
            results[i] = shoal_kv_value{SHOAL_OK, p, values[i]->data.size(), values[i]->flags};
        }
        return int(SHOAL_OK);
    });
}

namespace {

/// shoal_kv_incr / shoal_kv_decr.
int add_delta(shoal_kv* kv, bool incr, const char* key, size_t key_size, uint64_t delta, uint64_t* value,
              const char* what) {
    return guarded([&] {
        if (int rc = check_blocking_key(kv, key, key_size, what); rc != SHOAL_OK) {
            return rc;
        }
        auto& st = *kv->state;
        std::string_view k(key, key_size);
        auto f = st.runtime().engine().submit(st.shard(), [&st, incr, k, delta] {
            return incr ? st.client().incr(k, delta) : st.client().decr(k, delta);
        });
        std::optional<uint64_t> n = f.get();
        if (!n) {
            return fail(SHOAL_ENOTFOUND, std::string(what) + ": no such key");
        }
        if (value) {
            *value = *n;
        }
        return int(SHOAL_OK);
    });
}

} // namespace

int shoal_kv_delete(shoal_kv* kv, const char* key, size_t key_size) {
    return found_or_not(kv, key, key_size, "shoal_kv_delete",
                        [](kv::client& c, std::string_view k) { return c.remove(k); });
}

int shoal_kv_incr(shoal_kv* kv, const char* key, size_t key_size, uint64_t delta, uint64_t* value) {
    return add_delta(kv, true, key, key_size, delta, value, "shoal_kv_incr");
}

int shoal_kv_decr(shoal_kv* kv, const char* key, size_t key_size, uint64_t delta, uint64_t* value) {
    return add_delta(kv, false, key, key_size, delta, value, "shoal_kv_decr");
}

int shoal_kv_touch(shoal_kv* kv, const char* key, size_t key_size, int64_t exptime) {
    return found_or_not(kv, key, key_size, "shoal_kv_touch",
                        [exptime](kv::client& c, std::string_view k) { return c.touch(k, exptime); });
}

int shoal_kv_flush_all(shoal_kv* kv, int64_t delay) {
    return guarded([&] {
        if (int rc = check(kv, "shoal_kv_flush_all", true); rc != SHOAL_OK) {
            return rc;
        }
        auto& st = *kv->state;
        st.runtime().engine().submit(st.shard(), [&st, delay] { return st.client().flush_all(delay); }).get();
        return int(SHOAL_OK);
    });
}

int shoal_kv_stats(shoal_kv* kv, size_t server, char** text, size_t* size) {
    return guarded([&] {
        if (!text || !size) {
            return fail(SHOAL_EINVAL, "shoal_kv_stats: NULL text or size");
        }
        *text = nullptr;
        *size = 0;
        if (int rc = check(kv, "shoal_kv_stats", true); rc != SHOAL_OK) {
            return rc;
        }
        auto& st = *kv->state;
        kv::server_stats stats =
            st.runtime()
                .engine()
                .submit(st.shard(), [&st, server] { return st.client().stats_of(server); })
                .get();
        std::string lines;
        for (const auto& [name, value] : stats) {
            lines += name;
            lines += ' ';
            lines += value;
            lines += '\n';
        }
        auto* p = static_cast<char*>(malloc_copy(std::string_view(lines.c_str(), lines.size() + 1)));
        if (!p) {
            return fail(SHOAL_ENOMEM, "shoal_kv_stats: out of memory");
        }
        *text = p;
        *size = lines.size();
        return int(SHOAL_OK);
    });
}

int shoal_kv_set_async(shoal_kv* kv, const char* key, size_t key_size, const void* value, size_t size,
                       uint32_t flags, int64_t exptime, shoal_done_cb done, void* user) {
    return store_async(kv, store_op::set, key, key_size, value, size, flags, exptime, 0, done, user,
                       "shoal_kv_set_async");
}

int shoal_kv_add_async(shoal_kv* kv, const char* key, size_t key_size, const void* value, size_t size,
                       uint32_t flags, int64_t exptime, shoal_done_cb done, void* user) {
    return store_async(kv, store_op::add, key, key_size, value, size, flags, exptime, 0, done, user,
                       "shoal_kv_add_async");
}

int shoal_kv_replace_async(shoal_kv* kv, const char* key, size_t key_size, const void* value, size_t size,
                           uint32_t flags, int64_t exptime, shoal_done_cb done, void* user) {
    return store_async(kv, store_op::replace, key, key_size, value, size, flags, exptime, 0, done, user,
                       "shoal_kv_replace_async");
}

int shoal_kv_append_async(shoal_kv* kv, const char* key, size_t key_size, const void* value, size_t size,
                          shoal_done_cb done, void* user) {
    return store_async(kv, store_op::append, key, key_size, value, size, 0, 0, 0, done, user,
                       "shoal_kv_append_async");
}

int shoal_kv_prepend_async(shoal_kv* kv, const char* key, size_t key_size, const void* value, size_t size,
                           shoal_done_cb done, void* user) {
    return store_async(kv, store_op::prepend, key, key_size, value, size, 0, 0, 0, done, user,
                       "shoal_kv_prepend_async");
}

int shoal_kv_cas_async(shoal_kv* kv, const char* key, size_t key_size, const void* value, size_t size,
                       uint32_t flags, int64_t exptime, uint64_t cas_unique, shoal_done_cb done, void* user) {
    return store_async(kv, store_op::cas, key, key_size, value, size, flags, exptime, cas_unique, done, user,
                       "shoal_kv_cas_async");
}

int shoal_kv_get_async(shoal_kv* kv, const char* key, size_t key_size, shoal_kv_get_cb done, void* user) {
    return get_async(kv, key, key_size, std::nullopt, done, user, "shoal_kv_get_async");
}

int shoal_kv_delete_async(shoal_kv* kv, const char* key, size_t key_size, shoal_done_cb done, void* user) {
    return found_async(kv, key, key_size, done, user, "shoal_kv_delete_async",
                       [](kv::client& c, std::string_view k) { return c.remove(k); });
}

int shoal_kv_touch_async(shoal_kv* kv, const char* key, size_t key_size, int64_t exptime, shoal_done_cb done,
                         void* user) {
    return found_async(kv, key, key_size, done, user, "shoal_kv_touch_async",
                       [exptime](kv::client& c, std::string_view k) { return c.touch(k, exptime); });
}

int shoal_kv_incr_async(shoal_kv* kv, const char* key, size_t key_size, uint64_t delta,
                        shoal_kv_count_cb done, void* user) {
    return delta_async(kv, true, key, key_size, delta, done, user, "shoal_kv_incr_async");
}

int shoal_kv_decr_async(shoal_kv* kv, const char* key, size_t key_size, uint64_t delta,
                        shoal_kv_count_cb done, void* user) {
    return delta_async(kv, false, key, key_size, delta, done, user, "shoal_kv_decr_async");
}

int shoal_kv_gat_async(shoal_kv* kv, const char* key, size_t key_size, int64_t exptime, shoal_kv_get_cb done,
                       void* user) {
    return get_async(kv, key, key_size, exptime, done, user, "shoal_kv_gat_async");
}

} // extern "C"

// The KV calls on registered buffers (shoal_kv_*_buffer*): kv::client's set_from / get_into.

namespace {

/// What a get into a buffer yields: where the value lies (status SHOAL_OK), or for
/// SHOAL_ETOOSMALL the capacity needed in `value.length`.
using placed_outcome = async_result<kv::placed_value>;

/// On the client's shard: `key`'s value placed in `capacity` bytes at `offset` of `b`, as a
/// status (a too-small range is SHOAL_ETOOSMALL with the size needed, not an exception).
future<placed_outcome> get_placed(kv_state& st, buffer_state& b, std::string_view key, size_t offset,
                                  size_t capacity) {
    return st.client()
        .get_into(key, b.pool_buffer(), offset, capacity)
        .then_wrapped([](future<std::optional<kv::placed_value>> f) {
            try {
                std::optional<kv::placed_value> where = f.get();
                if (!where) {
                    return placed_outcome{SHOAL_ENOTFOUND, "no such key", {}};
                }
                return placed_outcome{SHOAL_OK, {}, *where};
            } catch (const kv::client_error& e) {
                if (e.needed_capacity() == 0) {
                    throw;
                }
                kv::placed_value needed;
                needed.length = e.needed_capacity();
                return placed_outcome{SHOAL_ETOOSMALL, e.what(), needed};
            }
        });
}

/// On the client's shard: stores the `size` bytes at `offset` of `b` under `key`.
future<kv::store_outcome> set_placed(kv_state& st, buffer_state& b, std::string_view key, size_t offset,
                                     size_t size, uint32_t flags, int64_t exptime) {
    return st.client().set_from(key, b.pool_buffer(), offset, size, flags, exptime);
}

/// The checks every buffer call starts with: the handle, the key and the buffer's range. The
/// buffer's state, or null with the status in `rc`.
std::shared_ptr<buffer_state> checked_buffer(shoal_kv* kv, const char* key, size_t key_size,
                                             const shoal_buffer* buf, size_t offset, size_t len,
                                             bool blocking, const char* what, int& rc) {
    rc = check(kv, what, blocking);
    if (rc == SHOAL_OK) {
        rc = check_key(key, key_size, what);
    }
    if (rc != SHOAL_OK) {
        return nullptr;
    }
    return usable_buffer(buf, kv->state->shard(), offset, len, what, rc);
}

} // namespace

extern "C" {

size_t shoal_kv_buffer_capacity(size_t key_size, size_t value_size) {
    return kv::get_into_capacity(key_size, value_size);
}

int shoal_kv_set_buffer(shoal_kv* kv, const char* key, size_t key_size, const shoal_buffer* buf,
                        size_t offset, size_t size, uint32_t flags, int64_t exptime) {
    const char* what = "shoal_kv_set_buffer";
    return guarded([&] {
        int rc;
        auto b = checked_buffer(kv, key, key_size, buf, offset, size, true, what, rc);
        if (!b) {
            return rc;
        }
        auto& st = *kv->state;
        std::string_view k(key, key_size);
        auto f = st.runtime().engine().submit(st.shard(), [&st, &b, k, offset, size, flags, exptime] {
            return set_placed(st, *b, k, offset, size, flags, exptime);
        });
        return store_status(f.get(), what);
    });
}

int shoal_kv_get_buffer(shoal_kv* kv, const char* key, size_t key_size, shoal_buffer* buf, size_t offset,
                        size_t capacity, size_t* value_offset, size_t* size, uint32_t* flags) {
    const char* what = "shoal_kv_get_buffer";
    return guarded([&] {
        if (!value_offset) {
            return fail(SHOAL_EINVAL, std::string(what) + ": value_offset is NULL");
        }
        int rc;
        auto b = checked_buffer(kv, key, key_size, buf, offset, capacity, true, what, rc);
        if (!b) {
            return rc;
        }
        auto& st = *kv->state;
        std::string_view k(key, key_size);
        auto f = st.runtime().engine().submit(
            st.shard(), [&st, &b, k, offset, capacity] { return get_placed(st, *b, k, offset, capacity); });
        placed_outcome got = f.get();
        if (got.status == SHOAL_ETOOSMALL && size) {
            *size = got.value.length;
        }
        if (got.status != SHOAL_OK) {
            return fail(got.status, std::string(what) + ": " + got.error);
        }
        *value_offset = got.value.offset;
        if (size) {
            *size = got.value.length;
        }
        if (flags) {
            *flags = got.value.flags;
        }
        return int(SHOAL_OK);
    });
}

int shoal_kv_get_many_buffer(shoal_kv* kv, size_t count, const char* const* keys, const size_t* key_sizes,
                             shoal_buffer* buf, size_t slot, shoal_kv_placed* results, size_t* needed) {
    const char* what = "shoal_kv_get_many_buffer";
    return guarded([&] {
        if (count && (!keys || !key_sizes || !results)) {
            return fail(SHOAL_EINVAL, std::string(what) + ": NULL keys, sizes or results");
        }
        if (int rc = check(kv, what, true); rc != SHOAL_OK) {
            return rc;
        }
        std::vector<std::string> ks;
        if (int rc = collect_keys(count, keys, key_sizes, what, ks); rc != SHOAL_OK) {
            return rc;
        }
        if (slot && count > SIZE_MAX / slot) {
            return fail(SHOAL_EINVAL, std::string(what) + ": count × slot overflows");
        }
        int rc;
        auto b = usable_buffer(buf, kv->state->shard(), 0, count * slot, what, rc);
        if (!b) {
            return rc;
        }
        auto& st = *kv->state;
        using many = std::vector<std::optional<kv::placed_value>>;
        size_t too_small = 0; // the slot a value needs, when one did not fit
        auto f = st.runtime().engine().submit(st.shard(), [&st, &b, &ks, slot, &too_small] {
            return st.client()
                .get_many_into(std::move(ks), b->pool_buffer(), slot)
                .then_wrapped([&too_small](future<many> got) {
                    try {
                        return got.get();
                    } catch (const kv::client_error& e) {
                        if (e.needed_capacity() == 0) {
                            throw;
                        }
                        too_small = e.needed_capacity();
                        return many();
                    }
                });
        });
        many got = f.get();
        if (too_small) {
            if (needed) {
                *needed = too_small;
            }
            return fail(SHOAL_ETOOSMALL, std::string(what) + ": a value needs a slot of " +
                                             std::to_string(too_small) + " bytes, the slot has " +
                                             std::to_string(slot));
        }
        for (size_t i = 0; i < count; ++i) {
            results[i] = shoal_kv_placed{SHOAL_ENOTFOUND, 0, 0, 0};
            if (got[i]) {
                results[i] = shoal_kv_placed{SHOAL_OK, got[i]->offset, got[i]->length, got[i]->flags};
            }
        }
        return int(SHOAL_OK);
    });
}

int shoal_kv_set_buffer_async(shoal_kv* kv, const char* key, size_t key_size, const shoal_buffer* buf,
                              size_t offset, size_t size, uint32_t flags, int64_t exptime, shoal_done_cb done,
                              void* user) {
    const char* what = "shoal_kv_set_buffer_async";
    return guarded([&] {
        if (!done) {
            return fail(SHOAL_EINVAL, std::string(what) + ": NULL callback");
        }
        int rc;
        auto b = checked_buffer(kv, key, key_size, buf, offset, size, false, what, rc);
        if (!b) {
            return rc;
        }
        // Work handed to a shard runs in the order it was handed over: set_from takes its hold on
        // the buffer's memory before a shoal_buffer_free made after this call returns drops it.
        return start_async(
            kv, what,
            [b = std::move(b), k = std::string(key, key_size), offset, size, flags, exptime](kv_state& st) {
                return set_placed(st, *b, k, offset, size, flags, exptime).then([](kv::store_outcome o) {
                    return o == kv::store_outcome::stored
                               ? placed_outcome{}
                               : placed_outcome{SHOAL_ENOTSTORED, "not stored", {}};
                });
            },
            [done, user](int status, const char* error, placed_outcome*) { done(user, status, error); });
    });
}

int shoal_kv_get_buffer_async(shoal_kv* kv, const char* key, size_t key_size, shoal_buffer* buf,
                              size_t offset, size_t capacity, shoal_kv_get_buffer_cb done, void* user) {
    const char* what = "shoal_kv_get_buffer_async";
    return guarded([&] {
        if (!done) {
            return fail(SHOAL_EINVAL, std::string(what) + ": NULL callback");
        }
        int rc;
        auto b = checked_buffer(kv, key, key_size, buf, offset, capacity, false, what, rc);
        if (!b) {
            return rc;
        }
        return start_async(
            kv, what,
            [b = std::move(b), k = std::string(key, key_size), offset, capacity](kv_state& st) {
                return get_placed(st, *b, k, offset, capacity);
            },
            [done, user](int status, const char* error, placed_outcome* result) {
                const kv::placed_value none;
                const kv::placed_value& v = result ? result->value : none;
                done(user, status, v.offset, v.length, v.flags, error);
            });
    });
}

} // extern "C"
