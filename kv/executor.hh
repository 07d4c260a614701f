#pragma once

#include "kv/protocol.hh"
#include "kv/store.hh"

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

/// Appends `n` in decimal.
void append_number(std::string& out, uint64_t n);

} // namespace shoal::kv
