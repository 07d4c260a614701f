#include "kv/server/internal/item_buffer.hh"

#include "core/smp.hh"

namespace shoal::kv {

namespace {

/// Holds one item reference for the buffers over its value.
class item_ref_owner final : public net::buffer_owner {
public:
    item_ref_owner(store& s, item* it, unsigned home) noexcept
        : _store(s)
        , _item(it)
        , _home(home) {}

private:
    void release() noexcept override {
        if (this_shard_id() == _home) {
            _store.unref(_item);
        } else {
            // The store belongs to its shard: drop the reference there. Nothing waits for the
            // answer; the owning server waits for its references before it stops.
            (void)submit_to(_home, [s = &_store, it = _item] { s->unref(it); });
        }
        delete this;
    }
    store& _store;
    item* _item;
    unsigned _home;
};

} // namespace

net::temporary_buffer item_value_buffer(store& s, item* it, unsigned home) {
    auto* owner = new item_ref_owner(s, it, home);
    return net::temporary_buffer(it->value_data(), it->value_len, owner);
}

} // namespace shoal::kv
