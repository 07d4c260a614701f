#pragma once

#include "kv/store/item.hh"
#include "kv/store/store.hh"
#include "net/temporary_buffer.hh"

namespace shoal::kv {

/// The value of `it`, an item of `s` (the store of shard `home`) on which the caller holds a
/// reference (`store::ref`), as a buffer the socket sends from item memory without a copy. The
/// reference is dropped when the last slice of the buffer goes: on `home` directly, from
/// another shard with a message to `home`. `s` must outlive the buffer (the server waits for
/// `store::refs_held()` to reach 0 before it stops).
net::temporary_buffer item_value_buffer(store& s, item* it, unsigned home);

} // namespace shoal::kv
