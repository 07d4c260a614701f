#pragma once

#include "kv/protocol/protocol.hh"
#include "kv/store/store.hh"

#include <string>
#include <string_view>

namespace shoal::kv {

/// Appends the reply of one key of a get/gets/gat/gats request (`VALUE ...` on a hit, nothing
/// on a miss) executed on the store that owns the key; `h` is the key's hash. With `held`, a
/// value of at least `zero_copy_min` bytes is not copied: only its `VALUE` line is appended,
/// the item is referenced (`store::ref`) and returned in `*held`, and the caller sends the
/// value from item memory, then "\r\n", then `unref`s it. `*held` is null otherwise.
void execute_get_key(const request& r, std::string_view key, uint64_t h, store& s, std::string& out,
                     item** held = nullptr, size_t zero_copy_min = 0);

/// Executes a single-key request (storage, delete, incr/decr, touch, mg/ms/md/ma) on the store
/// that owns `r.key` (hash `h`) and appends memcached's exact reply, nothing under noreply.
void execute_key_command(const request& r, uint64_t h, store& s, std::string& out);

/// True for the storage requests whose value, received into an item reserved for it
/// (`store::reserve` with the request's flags and exptime), is linked in place by
/// `execute_landed_storage`: classic set, add, replace and cas. Other storage requests execute
/// with `r.value` pointing at the received bytes.
bool links_landed_value(const request& r) noexcept;

/// Links `landed`, an item reserved for request `r` (see `links_landed_value`) whose value is
/// now written, under the request's rules on the store that owns it, and appends memcached's
/// reply. The reservation ends whatever the outcome.
void execute_landed_storage(const request& r, uint64_t h, item* landed, store& s, std::string& out);

/// Appends `n` in decimal.
void append_number(std::string& out, uint64_t n);

} // namespace shoal::kv
