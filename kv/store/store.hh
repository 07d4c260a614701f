#pragma once

#include "kv/store/hash.hh"
#include "kv/store/item.hh"
#include "kv/store/page_source.hh"
#include "kv/store/stats.hh"

#include <bitset>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace shoal::kv {

/// How a shard's store is sized.
struct store_config {
    /// Bytes of value memory this store may use (its share of the server's -m).
    size_t memory_limit = 64 << 20;
    /// Largest item, memcached's -I: header + key + value as memcached counts them.
    size_t max_item_size = 1 << 20;
    /// Smallest chunk and the factor between consecutive slab classes (memcached's -n, -f).
    size_t min_chunk = 96;
    double growth_factor = 1.25;
    /// Items are records remote readers validate (kv/store/internal/record.hh): each chunk has a trailer
    /// (version, checksum) sealed when the item is linked and cleared when it is unlinked,
    /// values never change in place, and a freed chunk is reused only after `grace_epochs`
    /// calls of `advance_epoch` (sooner only when memory is short: `early_reuses`).
    bool remote_readable = false;
    /// Epochs a freed chunk waits before reuse (remote_readable only).
    uint32_t grace_epochs = 2;
};

/// What a storage command did.
enum class store_result { stored, not_stored, exists, not_found, too_large, no_memory };

/// How a storage command treats an existing item.
enum class store_mode { set, add, replace, append, prepend, cas };

/// What incr/decr did.
enum class delta_result { ok, not_found, non_numeric, no_memory };

/// Per slab class figures for `stats slabs` and `stats items`.
struct slab_class_info {
    unsigned id;
    size_t chunk_size;
    size_t chunks_per_page;
    size_t pages;
    size_t used_chunks;
    size_t free_chunks;
    size_t items;
    uint64_t evicted;
    uint64_t mem_requested;
    uint32_t oldest_time; ///< last access time of the LRU tail (0 when empty)
};

/// One shard's key-value store: a chained hash table over items that live in slab chunks
/// carved from pages of a `page_source`, one LRU per slab class, memcached's expiry, flush and
/// CAS rules, and its statistics. Time is whole Unix seconds set by the owner (`set_time`), as
/// memcached's clock is: the server ticks it every second, tests move it at will. Not
/// thread-safe: a shard uses its own store only.
class store {
public:
    /// A store allocating from `pages` (whose page size must hold the largest item).
    store(const store_config& cfg, std::unique_ptr<page_source> pages, uint32_t now);
    ~store();
    store(const store&) = delete;
    store& operator=(const store&) = delete;

    /// The page size a `page_source` needs for `cfg`.
    static size_t page_size_for(const store_config& cfg) noexcept;

    /// Sets the current time (Unix seconds). The tick that reaches a delayed flush's deadline
    /// runs it as `flush_all(0)` would (below).
    void set_time(uint32_t now) noexcept {
        _now = now;
        if (_flush_pending && _oldest_live <= now) [[unlikely]] {
            flush_now();
        }
    }
    /// The current time (Unix seconds).
    uint32_t now() const noexcept { return _now; }
    /// Gives the live item `it` a new exptime (a client's, converted by `expiry_of`). In a
    /// remotely readable store the record is sealed again: its checksum covers the exptime, and
    /// a stale one would make every cached READ of the item look torn.
    void set_exptime(item* it, int64_t exptime) noexcept;
    /// Converts a client's exptime to an absolute time the way memcached does: 0 never,
    /// negative already expired, up to 30 days relative to now, above that absolute Unix time
    /// (already expired if not after the server's start).
    uint32_t expiry_of(int64_t exptime) const noexcept;

    /// The live item of `key` (hash `h`) or nullptr; counts a get hit or miss and marks the
    /// item fetched and recently used.
    item* get(std::string_view key, uint64_t h) noexcept;
    /// The live item without counting or touching anything (meta flags, tests).
    item* peek(std::string_view key, uint64_t h) noexcept;
    /// `get` that also sets a new exptime (gat/gats): counts touch hits and misses.
    item* get_and_touch(std::string_view key, uint64_t h, int64_t exptime) noexcept;
    /// Sets a new exptime; false when not found.
    bool touch(std::string_view key, uint64_t h, int64_t exptime) noexcept;

    /// A storage command. `cas_in` is the client's unique for `cas` (and a meta compare when
    /// not 0 in the other modes); `*cas_out` receives the new item's unique when stored.
    store_result put(store_mode mode, std::string_view key, uint64_t h, uint32_t client_flags,
                     int64_t exptime, std::string_view value, uint64_t cas_in = 0,
                     uint64_t* cas_out = nullptr) noexcept;
    /// Counts a storage command refused before its value was stored, `why` being too_large (the
    /// value exceeds the item limit; its data block was skipped) or no_memory (no room to take
    /// the value in), and, when `drop_old` (a set), unlinks the key's current value as memcached
    /// does. Returns `why`.
    store_result reject(std::string_view key, uint64_t h, bool drop_old, store_result why) noexcept;
    /// Deletes; `cas_in` (when not 0) must match. Returns stored (deleted), not_found or exists.
    store_result remove(std::string_view key, uint64_t h, uint64_t cas_in = 0) noexcept;
    /// incr (`incr` true) or decr by `delta` with memcached's rules: the value must be a decimal
    /// number below 2^64, incr wraps at 2^64, decr stops at 0; a shorter result is padded with
    /// spaces in place, a longer one gets a new item. The new number goes to `*result`.
    delta_result add_delta(std::string_view key, uint64_t h, bool incr, uint64_t delta, uint64_t* result,
                           uint64_t* cas_out = nullptr) noexcept;
    /// Unlinks `it` (it must be live in this store).
    void unlink(item* it) noexcept { unlink(it, hash_key(it->key())); }
    /// Unlinks `it`, whose key hashes to `h`.
    void unlink(item* it, uint64_t h) noexcept;
    /// Takes a reference on live item `it` for a reply sent from its memory: until `unref`, the
    /// chunk is not reused, even if the item is deleted, overwritten, evicted or expires (the
    /// store then just drops its own hold), and its value is not changed in place. False (no
    /// reference taken) when the item already has the most references a header counts.
    bool ref(item* it) noexcept;
    /// Drops a reference taken with `ref`; the last one frees the chunk of an unlinked item.
    void unref(item* it) noexcept;
    /// References held by replies in flight (0 when no reply holds item memory).
    size_t refs_held() const noexcept { return _refs_held; }
    /// An unlinked item of `key` with room for `value_len` bytes, for a value written later
    /// (by a remote client); it holds one reference until `commit` or `abandon`. Null with
    /// `*why` too_large or no_memory.
    item* reserve(std::string_view key, uint32_t client_flags, int64_t exptime, size_t value_len,
                  store_result* why) noexcept;
    /// Links a reserved item whose value is now written, under `mode` (set, add, replace, cas
    /// with `cas_in`) as `put` would; `*cas_out` receives its unique when stored. The item is
    /// released whatever the outcome.
    store_result commit(store_mode mode, item* it, uint64_t h, uint64_t cas_in, uint64_t* cas_out) noexcept;
    /// Gives a reserved item back unused.
    void abandon(item* it) noexcept { unref(it); }
    /// Bytes a remote reader READs for `it` (its record, kv/store/internal/record.hh; remote_readable only).
    static size_t record_bytes(const item* it) noexcept;
    /// Starts a new epoch: chunks freed `grace_epochs` epochs ago become reusable.
    void advance_epoch() noexcept { ++_epoch; }
    /// The current epoch.
    uint64_t epoch() const noexcept { return _epoch; }
    /// Freed chunks waiting for their grace period.
    size_t quarantined() const noexcept { return _quarantined; }
    /// Chunks reused before their grace period because memory was short.
    uint64_t early_reuses() const noexcept { return _early_reuses; }
    /// Invalidates every item stored before now (delay 0) or before `delay` (an exptime). An
    /// immediate flush unlinks every item at once; a delayed one does so at the first
    /// `set_time` at or past its deadline, the moment `is_dead` starts to say so, so that a
    /// remote reader's cached location fails from then on too (the unlink zeroes the record's
    /// version) and the memory returns. A later flush replaces a pending one.
    void flush_all(int64_t delay) noexcept;
    /// True when the item is past its exptime or a flush.
    bool is_dead(const item* it) const noexcept;

    /// The counters.
    const store_stats& stats() const noexcept { return _stats; }
    /// The counters, for owners that count commands the store does not see.
    store_stats& stats() noexcept { return _stats; }
    /// Resets the resettable counters (`stats reset`).
    void reset_stats() noexcept;
    /// Every slab class in use.
    std::vector<slab_class_info> slab_classes() const;
    /// Bytes of memory this store may use.
    size_t memory_limit() const noexcept { return _cfg.memory_limit; }
    /// Where the item memory comes from.
    page_source& pages() noexcept { return *_pages; }
    /// Largest item memcached's accounting allows.
    size_t max_item_size() const noexcept { return _cfg.max_item_size; }

private:
    static constexpr uint32_t no_page = UINT32_MAX;
    /// Pages per class asked for from which a store no longer lets classes that have pages
    /// spill into larger classes' chunks (`make_room`).
    static constexpr size_t many_pages_per_class = 3;

    /// A page taken from the source: where it is, the class it is carved for, its chunks in use.
    struct page_info {
        char* base;
        uint32_t used; ///< chunks taken (live, referenced or reserved items)
        uint32_t cls;
    };

    struct slab_class {
        size_t chunk_size = 0;
        size_t per_page = 0;
        std::vector<uint32_t> pages; ///< indexes into `_page_table`
        char* carve = nullptr;       ///< next uncarved chunk of the newest page
        char* carve_end = nullptr;
        uint32_t carve_page = no_page;
        item* free = nullptr;
        size_t free_count = 0;
        item* quarantine = nullptr; ///< freed chunks, oldest first, stamped in `time`
        item* quarantine_tail = nullptr;
        size_t used = 0;
        item* lru_head = nullptr;
        item* lru_tail = nullptr;
        uint64_t evicted = 0;
        uint64_t mem_requested = 0;
    };

    unsigned class_of(size_t bytes) const noexcept;
    item* allocate(size_t key_len, size_t value_len) noexcept;
    item* take_chunk(slab_class& c, bool early) noexcept;
    size_t chunk_need(size_t key_len, size_t value_len) const noexcept;
    bool add_page(unsigned cls) noexcept;
    bool make_room(unsigned cls, item** spilled) noexcept;
    unsigned oldest_class(unsigned cls, const std::bitset<256>& tried, bool keep_last_pages) const noexcept;
    bool move_page(unsigned from, unsigned to, uint32_t page, bool spill) noexcept;
    bool move_any_page(unsigned from, unsigned to) noexcept {
        uint32_t page = pick_page(_classes[from]);
        return page != no_page && move_page(from, to, page, false);
    }
    bool move_sparse_page(unsigned cls, bool nearly_empty_only) noexcept;
    item* take_larger(unsigned cls, unsigned except) noexcept;
    size_t ready_chunks(const slab_class& c) const noexcept;
    uint32_t pick_page(const slab_class& v) const noexcept;
    void strip_free_chunks(slab_class& v, uint32_t page) noexcept;
    void relocate(slab_class& v, item* it, item* n) noexcept;
    bool evict_from(unsigned cls) noexcept;
    bool page_movable(const slab_class& v, uint32_t page) const noexcept;
    char* carved_end(const slab_class& v, uint32_t page) const noexcept;
    uint32_t tail_age(const slab_class& c) const noexcept;
    void release(item* it) noexcept;
    item* live(std::string_view key, uint64_t h) noexcept;
    item* touch_item(std::string_view key, uint64_t h, int64_t exptime) noexcept;
    item* find(std::string_view key, uint64_t h, item*** slot) const noexcept;
    void link(item* it, uint64_t h) noexcept;
    void replace(item* old_it, item* new_it, uint64_t h) noexcept;
    void lru_unlink(item* it) noexcept;
    void lru_push(item* it) noexcept;
    void bump(item* it) noexcept;
    void grow_table();
    item* new_item(std::string_view key, uint32_t client_flags, uint32_t exptime, size_t value_len) noexcept;
    uint64_t next_cas() noexcept { return ++_cas; }
    /// Kills every item stored before this moment and unlinks them all (flush_all's work).
    void flush_now() noexcept;

    store_config _cfg;
    std::unique_ptr<page_source> _pages;
    size_t _page_size;
    size_t _max_pages;
    std::vector<page_info> _page_table; ///< every page taken, by index (items record theirs)
    std::vector<slab_class> _classes;
    std::bitset<256> _asked; ///< classes an allocation has asked for
    std::vector<item*> _table;
    uint64_t _mask = 0;
    uint32_t _now;
    uint32_t _started;
    uint32_t _oldest_live = 0;
    uint64_t _oldest_cas = 0;
    bool _flush_pending = false; ///< a delayed flush_all whose deadline (`_oldest_live`) is ahead
    uint64_t _cas = 0;
    item* _pinned = nullptr; ///< the item an allocation must not evict (append, incr)
    size_t _refs_held = 0;
    uint64_t _epoch = 0;
    size_t _quarantined = 0;
    uint64_t _early_reuses = 0;
    store_stats _stats;
};

} // namespace shoal::kv
