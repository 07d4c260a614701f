#include "kv/store/store.hh"

#include "kv/store/internal/record.hh"

#include <algorithm>
#include <bitset>
#include <cassert>
#include <cstring>

namespace shoal::kv {

namespace {

/// memcached's REALTIME_MAXDELTA: exptimes above it are absolute Unix times.
constexpr int64_t max_relative_exptime = 60 * 60 * 24 * 30;

bool is_c_space(char c) noexcept {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/// memcached's safe_strtoull applied to an item's value (which memcached follows with CRLF):
/// leading white space, an optional sign, at least one digit, no overflow, then white space or
/// the end; a '-' is refused only when the result would be negative as a signed number.
bool parse_stored_number(std::string_view v, uint64_t* out) noexcept {
    size_t i = 0;
    while (i < v.size() && is_c_space(v[i])) {
        ++i;
    }
    bool negative = false;
    if (i < v.size() && (v[i] == '+' || v[i] == '-')) {
        negative = v[i] == '-';
        ++i;
    }
    size_t digits = 0;
    uint64_t n = 0;
    bool overflow = false;
    for (; i < v.size() && v[i] >= '0' && v[i] <= '9'; ++i, ++digits) {
        uint64_t d = uint64_t(v[i] - '0');
        if (n > (UINT64_MAX - d) / 10) {
            overflow = true;
        }
        n = n * 10 + d;
    }
    if (digits == 0 || overflow) {
        return false;
    }
    if (i < v.size() && !is_c_space(v[i])) {
        return false;
    }
    if (negative) {
        n = uint64_t(0) - n;
        if (int64_t(n) < 0) {
            return false;
        }
    }
    *out = n;
    return true;
}

} // namespace

size_t store::page_size_for(const store_config& cfg) noexcept {
    // The header of an item is a few bytes larger than memcached's, so a page holds the largest
    // item memcached's accounting allows with room to spare.
    return std::max<size_t>(cfg.max_item_size, 1 << 20) + 64;
}

store::store(const store_config& cfg, std::unique_ptr<page_source> pages, uint32_t now)
    : _cfg(cfg)
    , _pages(std::move(pages))
    , _page_size(_pages->page_size())
    , _max_pages(std::clamp<size_t>(cfg.memory_limit / _pages->page_size(), 1, size_t(1) << 24))
    , _now(now)
    , _started(now - 2) {
    assert(_page_size >= page_size_for(cfg));
    double size = double(std::max<size_t>(cfg.min_chunk, sizeof(item) + 8));
    double factor = std::max(cfg.growth_factor, 1.01);
    while (size <= double(_page_size / 2) && _classes.size() < 255) { // an item's class is a byte
        size_t chunk = (size_t(size) + 7) & ~size_t(7);
        if (_classes.empty() || chunk > _classes.back().chunk_size) {
            _classes.emplace_back().chunk_size = chunk;
        }
        size *= factor;
    }
    _classes.emplace_back().chunk_size = _page_size;
    for (auto& c : _classes) {
        c.per_page = _page_size / c.chunk_size;
    }
    _page_table.reserve(_max_pages); // add_page never allocates
    _table.assign(1024, nullptr);
    _mask = _table.size() - 1;
    _stats.hash_bytes = _table.size() * sizeof(item*);
}

store::~store() {
    for (const page_info& p : _page_table) {
        _pages->free_page(p.base);
    }
}

uint32_t store::expiry_of(int64_t exptime) const noexcept {
    if (exptime == 0) {
        return 0;
    }
    if (exptime < 0) {
        return 1;
    }
    if (exptime > max_relative_exptime) {
        if (exptime <= int64_t(_started)) {
            return 1;
        }
        return uint32_t(std::min<int64_t>(exptime, UINT32_MAX));
    }
    return uint32_t(std::min<int64_t>(int64_t(_now) + exptime, UINT32_MAX));
}

bool store::is_dead(const item* it) const noexcept {
    if (it->exptime != 0 && it->exptime <= _now) {
        return true;
    }
    if (_oldest_live == 0 || _oldest_live > _now) {
        return false;
    }
    return it->time <= _oldest_live || (_oldest_cas != 0 && it->cas < _oldest_cas);
}

item* store::find(std::string_view key, uint64_t h, item*** slot) const noexcept {
    item** p = const_cast<item**>(&_table[h & _mask]);
    for (item* it = *p; it; p = &it->hash_next, it = *p) {
        if (it->key_len == key.size() && std::memcmp(it + 1, key.data(), key.size()) == 0) {
            if (slot) {
                *slot = p;
            }
            return it;
        }
    }
    return nullptr;
}

item* store::peek(std::string_view key, uint64_t h) noexcept {
    item* it = find(key, h, nullptr);
    if (it && is_dead(it)) {
        return nullptr;
    }
    return it;
}

item* store::get(std::string_view key, uint64_t h) noexcept {
    ++_stats.cmd_get;
    item* it = find(key, h, nullptr);
    if (it && is_dead(it)) {
        if (it->exptime != 0 && it->exptime <= _now) {
            ++_stats.get_expired;
        } else {
            ++_stats.get_flushed;
        }
        unlink(it, h);
        it = nullptr;
    }
    if (!it) {
        ++_stats.get_misses;
        return nullptr;
    }
    ++_stats.get_hits;
    bump(it);
    return it;
}

item* store::get_and_touch(std::string_view key, uint64_t h, int64_t exptime) noexcept {
    ++_stats.cmd_get;
    return touch_item(key, h, exptime);
}

bool store::touch(std::string_view key, uint64_t h, int64_t exptime) noexcept {
    return touch_item(key, h, exptime) != nullptr;
}

item* store::touch_item(std::string_view key, uint64_t h, int64_t exptime) noexcept {
    ++_stats.cmd_touch;
    item* it = peek(key, h);
    if (!it) {
        ++_stats.touch_misses;
        return nullptr;
    }
    ++_stats.touch_hits;
    set_exptime(it, exptime);
    bump(it);
    return it;
}

void store::set_exptime(item* it, int64_t exptime) noexcept {
    uint32_t e = expiry_of(exptime);
    if (e == it->exptime) {
        return;
    }
    // A concurrent READ sees the old header and trailer, the new ones, or a mix that fails its
    // checksum and goes through the server.
    it->exptime = e;
    if (_cfg.remote_readable && (it->state & item::linked)) {
        record::seal(it);
    }
}

void store::bump(item* it) noexcept {
    // A second read marks it active (memcached's rule): it gets a second chance at the tail.
    it->state |= (it->state & item::fetched) ? item::active : item::fetched;
    it->time = _now;
    if (_classes[it->cls].lru_head != it) {
        lru_unlink(it);
        lru_push(it);
    }
}

void store::lru_unlink(item* it) noexcept {
    slab_class& c = _classes[it->cls];
    (it->prev ? it->prev->next : c.lru_head) = it->next;
    (it->next ? it->next->prev : c.lru_tail) = it->prev;
    it->prev = it->next = nullptr;
}

void store::lru_push(item* it) noexcept {
    slab_class& c = _classes[it->cls];
    it->prev = nullptr;
    it->next = c.lru_head;
    (c.lru_head ? c.lru_head->prev : c.lru_tail) = it;
    c.lru_head = it;
}

void store::link(item* it, uint64_t h) noexcept {
    item*& bucket = _table[h & _mask];
    it->hash_next = bucket;
    bucket = it;
    it->state |= item::linked;
    if (_cfg.remote_readable) {
        record::seal(it);
    }
    lru_push(it);
    ++_stats.curr_items;
    ++_stats.total_items;
    _stats.bytes += item::memcached_size(it->key_len, it->value_len);
    _classes[it->cls].mem_requested += item::memcached_size(it->key_len, it->value_len);
    if (_stats.curr_items > _table.size() + _table.size() / 2) {
        grow_table();
    }
}

void store::grow_table() {
    std::vector<item*> bigger;
    try {
        bigger.assign(_table.size() * 2, nullptr);
    } catch (const std::bad_alloc&) {
        return; // longer chains, still correct
    }
    uint64_t mask = bigger.size() - 1;
    for (item* head : _table) {
        while (head) {
            item* next = head->hash_next;
            item*& b = bigger[hash_key(head->key()) & mask];
            head->hash_next = b;
            b = head;
            head = next;
        }
    }
    _table.swap(bigger);
    _mask = mask;
    _stats.hash_bytes = _table.size() * sizeof(item*);
}

void store::unlink(item* it, uint64_t h) noexcept {
    item** slot = nullptr;
    [[maybe_unused]] item* found = find(it->key(), h, &slot);
    assert(found == it);
    *slot = it->hash_next;
    lru_unlink(it);
    it->state = 0;
    if (_cfg.remote_readable) {
        record::invalidate(it); // cached locations of it stop validating now
    }
    --_stats.curr_items;
    _stats.bytes -= item::memcached_size(it->key_len, it->value_len);
    _classes[it->cls].mem_requested -= item::memcached_size(it->key_len, it->value_len);
    if (it->refs == 0) {
        release(it); // else the last unref frees it
    }
}

bool store::ref(item* it) noexcept {
    if (it->refs == UINT16_MAX) {
        return false;
    }
    ++it->refs;
    ++_refs_held;
    return true;
}

void store::unref(item* it) noexcept {
    assert(it->refs > 0);
    --_refs_held;
    if (--it->refs == 0 && !(it->state & item::linked)) {
        release(it);
    }
}

void store::release(item* it) noexcept {
    slab_class& c = _classes[it->cls];
    it->state = 0;
    --c.used;
    --_page_table[it->page()].used;
    if (_cfg.remote_readable) {
        // A remote reader may still hold its location: reuse it only after the grace period.
        it->time = uint32_t(_epoch);
        it->next = nullptr;
        (c.quarantine_tail ? c.quarantine_tail->next : c.quarantine) = it;
        c.quarantine_tail = it;
        ++_quarantined;
        return;
    }
    it->next = c.free;
    c.free = it;
    ++c.free_count;
}

size_t store::record_bytes(const item* it) noexcept {
    return record::bytes(it->key_len, it->value_len);
}

size_t store::chunk_need(size_t key_len, size_t value_len) const noexcept {
    return _cfg.remote_readable ? record::bytes(key_len, value_len) : item::chunk_bytes(key_len, value_len);
}

unsigned store::class_of(size_t bytes) const noexcept {
    auto pos = std::lower_bound(_classes.begin(), _classes.end(), bytes,
                                [](const slab_class& c, size_t b) { return c.chunk_size < b; });
    return unsigned(pos - _classes.begin());
}

item* store::take_chunk(slab_class& c, bool early) noexcept {
    item* it = nullptr;
    if (c.free) {
        it = c.free;
        c.free = it->next;
        --c.free_count;
    } else if (c.carve && c.carve + c.chunk_size <= c.carve_end) {
        it = reinterpret_cast<item*>(c.carve);
        it->set_page(c.carve_page);
        c.carve += c.chunk_size;
    } else if (c.quarantine && (early || uint32_t(_epoch) - c.quarantine->time >= _cfg.grace_epochs)) {
        it = c.quarantine;
        if (uint32_t(_epoch) - it->time < _cfg.grace_epochs) {
            ++_early_reuses;
        }
        c.quarantine = it->next;
        if (!c.quarantine) {
            c.quarantine_tail = nullptr;
        }
        --_quarantined;
    }
    if (it) {
        ++c.used;
        ++_page_table[it->page()].used;
    }
    return it;
}

bool store::add_page(unsigned cls) noexcept {
    if (_page_table.size() >= _max_pages) {
        return false;
    }
    char* page = _pages->allocate_page();
    if (!page) {
        return false;
    }
    uint32_t id = uint32_t(_page_table.size());
    _page_table.push_back({page, 0, cls});
    _stats.total_malloced += _page_size;
    slab_class& c = _classes[cls];
    c.pages.push_back(id);
    c.carve = page;
    c.carve_end = page + c.per_page * c.chunk_size;
    c.carve_page = id;
    return true;
}

char* store::carved_end(const slab_class& v, uint32_t page) const noexcept {
    return page == v.carve_page ? v.carve : _page_table[page].base + v.per_page * v.chunk_size;
}

uint32_t store::tail_age(const slab_class& c) const noexcept {
    return c.lru_tail && c.lru_tail->time < _now ? _now - c.lru_tail->time : 0;
}

bool store::evict_from(unsigned cls) noexcept {
    slab_class& c = _classes[cls];
    // An active tail item (read twice) goes back to the head once, its mark cleared, as
    // memcached's segmented LRU keeps items read more than once: one-hit items go first.
    for (int chances = 0; chances < 5; ++chances) {
        item* t = c.lru_tail;
        if (!t || t == c.lru_head || !(t->state & item::active) || t == _pinned || t->refs) {
            break;
        }
        t->state &= uint8_t(~item::active);
        lru_unlink(t);
        lru_push(t);
    }
    // Dead items near the tail are reclaimed first, as memcached does; else the tail goes.
    item* victim = nullptr;
    int looked = 0;
    for (item* it = c.lru_tail; it && looked < 5; it = it->prev, ++looked) {
        if (it == _pinned || it->refs) {
            continue; // a reply is being sent from it: unlinking would free nothing
        }
        if (is_dead(it)) {
            ++_stats.reclaimed;
            if (!(it->state & item::fetched)) {
                ++_stats.expired_unfetched;
            }
            unlink(it);
            return true;
        }
        if (!victim) {
            victim = it;
        }
    }
    if (!victim) {
        return false;
    }
    ++_stats.evictions;
    ++c.evicted;
    if (!(victim->state & item::fetched)) {
        ++_stats.evicted_unfetched;
    }
    unlink(victim);
    return true;
}

bool store::make_room(unsigned cls, item** spilled) noexcept {
    // Class `cls` has no chunk to give. Memory under the limit comes first.
    if (add_page(cls)) {
        return true;
    }
    // Then a class whose free chunks add up to a page gives one up, its live items moved into
    // its other chunks: memory changes class without evicting anything (the one with the most
    // free memory gives first).
    unsigned spare = unsigned(_classes.size());
    size_t most = 0;
    for (unsigned i = 0; i < _classes.size(); ++i) {
        const slab_class& v = _classes[i];
        if (i == cls || v.pages.empty() || (v.pages.size() - 1) * v.per_page < v.used) {
            continue;
        }
        size_t free_bytes = (v.pages.size() * v.per_page - v.used) * v.chunk_size;
        if (free_bytes > most || spare == _classes.size()) {
            most = free_bytes;
            spare = i;
        }
    }
    if (spare != _classes.size()) {
        uint32_t page = pick_page(_classes[spare]);
        if (page != no_page && move_page(spare, cls, page, false)) {
            return true;
        }
    }
    // Then a ready chunk of a larger class (the item lives in that class), then a page emptied
    // into larger classes' chunks. In a store with few pages per class asked for this saves
    // whole pages for classes of few items. With many pages an item of a class that has pages
    // evicts in its class instead: spilled items hold chunks larger than they need, and the
    // pages moved to feed them empty other pages in turn.
    bool many_pages = _max_pages >= many_pages_per_class * _asked.count();
    if ((!many_pages || _classes[cls].pages.empty()) && (*spilled = take_larger(cls, cls))) {
        return true;
    }
    if (move_sparse_page(cls, many_pages)) {
        return true;
    }
    // Memory is full: evict in (approximately) one LRU order over all classes. The class whose
    // LRU tail is the oldest pays: `cls` itself (an eviction), or another class (a page move,
    // which evicts that class's coldest items and rescues the rest). A class keeps its last page
    // unless every item in it is older than `cls`'s tail, so no class in use starves.
    slab_class& c = _classes[cls];
    std::bitset<256> tried;
    tried.set(cls);
    unsigned oldest = oldest_class(cls, tried, true);
    // "About the oldest": another class pays only when its tail is clearly older (over four
    // times as old, and four seconds), so that classes of similar age do not trade pages back
    // and forth (each move evicts, and a load that is steady needs none); but the only item of
    // `cls` goes only when it is older than the other class's tail.
    uint32_t own_age = tail_age(c);
    uint32_t other_age = oldest < _classes.size() ? tail_age(_classes[oldest]) : 0;
    bool other_older = oldest < _classes.size() && (!c.lru_tail || other_age > 4 * own_age + 4 ||
                                                    (c.lru_tail == c.lru_head && other_age >= own_age));
    if (!other_older && evict_from(cls)) {
        return true;
    }
    // Then the classes in age order, while a page of theirs is held by a reference or the
    // allocation's own item; then `cls`'s own tail; then any class at all.
    for (; oldest < _classes.size(); oldest = oldest_class(cls, tried, true)) {
        if (move_any_page(oldest, cls)) {
            return true;
        }
        tried.set(oldest);
    }
    if (evict_from(cls)) {
        return true;
    }
    for (oldest = oldest_class(cls, tried, false); oldest < _classes.size();
         oldest = oldest_class(cls, tried, false)) {
        if (move_any_page(oldest, cls)) {
            return true;
        }
        tried.set(oldest);
    }
    return false;
}

unsigned store::oldest_class(unsigned cls, const std::bitset<256>& tried,
                             bool keep_last_pages) const noexcept {
    const slab_class& c = _classes[cls];
    unsigned oldest = unsigned(_classes.size());
    const item* oldest_rep = nullptr;
    size_t oldest_cost = 0;
    for (unsigned i = 0; i < _classes.size(); ++i) {
        const slab_class& v = _classes[i];
        if (tried[i] || v.pages.empty() || !v.lru_tail) {
            continue;
        }
        // What a move evicts at worst: the tail of a class with pages to spare, every item (the
        // head's age) of a class with one page, which gives it only if all of them are older.
        const item* rep = v.pages.size() < 2 ? v.lru_head : v.lru_tail;
        if (keep_last_pages && v.pages.size() < 2 && c.lru_tail && rep->time >= c.lru_tail->time) {
            continue;
        }
        // Oldest first (whole seconds); within a second, the class that loses the fewest items,
        // then the one stored longest ago.
        size_t cost = v.used - std::min(v.used, (v.pages.size() - 1) * v.per_page);
        if (!oldest_rep || rep->time < oldest_rep->time ||
            (rep->time == oldest_rep->time &&
             (cost < oldest_cost || (cost == oldest_cost && rep->cas < oldest_rep->cas)))) {
            oldest = i;
            oldest_rep = rep;
            oldest_cost = cost;
        }
    }
    return oldest;
}

bool store::page_movable(const slab_class& v, uint32_t page) const noexcept {
    const char* base = _page_table[page].base;
    const char* pinned = reinterpret_cast<const char*>(_pinned);
    if (pinned && pinned >= base && pinned < base + _page_size) {
        return false;
    }
    if (_refs_held == 0) {
        return true;
    }
    char* end = carved_end(v, page);
    for (const char* p = base; p + v.chunk_size <= end; p += v.chunk_size) {
        if (reinterpret_cast<const item*>(p)->refs) {
            return false; // a reply is sent from it, or a reserved value is being written
        }
    }
    return true;
}

uint32_t store::pick_page(const slab_class& v) const noexcept {
    // The page with the fewest chunks in use (the fewest items to move) that nothing holds. The
    // fewest first, checked alone: checking a page for references reads its chunk headers.
    uint32_t best = no_page;
    for (uint32_t p : v.pages) {
        if (best == no_page || _page_table[p].used < _page_table[best].used) {
            best = p;
        }
    }
    if (best == no_page || page_movable(v, best)) {
        return best;
    }
    best = no_page;
    for (uint32_t p : v.pages) {
        if ((best == no_page || _page_table[p].used < _page_table[best].used) && page_movable(v, p)) {
            best = p;
        }
    }
    return best;
}

void store::strip_free_chunks(slab_class& v, uint32_t page) noexcept {
    const page_info& pg = _page_table[page];
    size_t carved = size_t(carved_end(v, page) - pg.base) / v.chunk_size;
    if (carved == pg.used) {
        return; // no free or quarantined chunk on it
    }
    item** link_to = &v.free;
    for (item* it = v.free; it; it = it->next) {
        if (it->page() == page) {
            --v.free_count;
            continue;
        }
        *link_to = it;
        link_to = &it->next;
    }
    *link_to = nullptr;
    link_to = &v.quarantine;
    v.quarantine_tail = nullptr;
    for (item* it = v.quarantine; it; it = it->next) {
        if (it->page() == page) {
            --_quarantined;
            ++_early_reuses; // its page is reused now: validation covers the remote readers
            continue;
        }
        *link_to = it;
        link_to = &it->next;
        v.quarantine_tail = it;
    }
    *link_to = nullptr;
}

void store::relocate(slab_class& v, item* it, item* n) noexcept {
    // Into chunk `n` of another page of the same class, or of a larger class (which then holds
    // it): the same bytes, the same CAS unique, its place in the hash chain and (in its class)
    // in the LRU. A remote reader's location of the old record stops validating (the record is
    // invalidated) and it asks the server again.
    uint32_t page = n->page();
    uint8_t cls = n->cls;
    std::memcpy(static_cast<void*>(n), it, chunk_need(it->key_len, it->value_len));
    n->set_page(page);
    n->cls = cls;
    item** slot = nullptr;
    [[maybe_unused]] item* found = find(it->key(), hash_key(it->key()), &slot);
    assert(found == it);
    *slot = n;
    if (cls == it->cls) {
        (n->prev ? n->prev->next : v.lru_head) = n;
        (n->next ? n->next->prev : v.lru_tail) = n;
    } else {
        lru_unlink(it);
        slab_class& t = _classes[cls];
        uint64_t size = item::memcached_size(it->key_len, it->value_len);
        v.mem_requested -= size;
        t.mem_requested += size;
        if (t.lru_tail && n->time <= t.lru_tail->time) {
            n->prev = t.lru_tail; // older than all of the class: its tail
            n->next = nullptr;
            t.lru_tail->next = n;
            t.lru_tail = n;
        } else {
            lru_push(n);
        }
    }
    if (_cfg.remote_readable) {
        record::invalidate(it);
    }
    it->state = 0;
    --v.used;
    --_page_table[it->page()].used;
    ++_stats.slab_reassign_rescues;
}

item* store::take_larger(unsigned cls, unsigned except) noexcept {
    // The smallest larger class with a chunk ready (free, uncarved, or past its grace period).
    for (unsigned j = cls + 1; j < _classes.size(); ++j) {
        if (j == except || _classes[j].pages.empty()) {
            continue;
        }
        if (item* it = take_chunk(_classes[j], false)) {
            it->cls = uint8_t(j);
            return it;
        }
    }
    return nullptr;
}

size_t store::ready_chunks(const slab_class& c) const noexcept {
    return c.free_count + (c.carve ? size_t(c.carve_end - c.carve) / c.chunk_size : 0);
}

bool store::move_page(unsigned from, unsigned to, uint32_t page, bool spill) noexcept {
    // memcached's slab rebalancer, done at once: class `from` gives class `to` one page. Unless
    // `spill`, its coldest items are evicted until its other pages can hold every chunk in use;
    // then the page's remaining (hotter) items are moved into them (with `spill`, into larger
    // classes' ready chunks as well), so the LRU order decides what goes.
    slab_class& v = _classes[from];
    size_t keep = (v.pages.size() - 1) * v.per_page;
    while (!spill && v.used > keep) {
        uint64_t before = _stats.evictions;
        if (!evict_from(from)) {
            return false; // the tail is held: nothing was moved
        }
        _stats.slab_reassign_evictions_nomem += _stats.evictions - before;
    }
    strip_free_chunks(v, page);
    char* base = _page_table[page].base;
    char* end = carved_end(v, page);
    if (v.carve_page == page) {
        v.carve = v.carve_end = nullptr;
        v.carve_page = no_page;
    }
    for (char* p = base; p + v.chunk_size <= end && _page_table[page].used; p += v.chunk_size) {
        item* it = reinterpret_cast<item*>(p);
        if (it->state & item::linked) {
            item* n = take_chunk(v, true);
            if (n) {
                n->cls = uint8_t(from);
            } else {
                n = take_larger(from, to);
            }
            assert(n && n->page() != page);
            relocate(v, it, n);
        }
    }
    assert(_page_table[page].used == 0);
    v.pages.erase(std::find(v.pages.begin(), v.pages.end(), page));
    _page_table[page].cls = to;
    slab_class& c = _classes[to];
    c.pages.push_back(page);
    c.carve = base;
    c.carve_end = base + c.per_page * c.chunk_size;
    c.carve_page = page;
    ++_stats.slab_reassigns;
    return true;
}

bool store::move_sparse_page(unsigned cls, bool nearly_empty_only) noexcept {
    // No class has a page of free chunks, but pages are only partly used (a class with few
    // items still holds a whole page): the page with the fewest items whose items fit in free
    // chunks of their class or of larger classes moves, those items moved up. Memory is used
    // before anything is evicted. With `nearly_empty_only`, only a page whose chunks in use
    // fill at most an eighth of it, and not the page its class is carving (a page just given
    // to a class is not sparse, only not yet filled).
    size_t ready_above = 0; // ready chunks of classes above i (not `cls`)
    unsigned best_cls = unsigned(_classes.size());
    uint32_t best = no_page;
    for (unsigned i = unsigned(_classes.size()); i-- > 0;) {
        const slab_class& v = _classes[i];
        if (i != cls && !v.pages.empty()) {
            uint32_t p = no_page;
            for (uint32_t q : v.pages) {
                if ((!nearly_empty_only || q != v.carve_page) &&
                    (p == no_page || _page_table[q].used < _page_table[p].used)) {
                    p = q;
                }
            }
            size_t used = p == no_page ? 0 : _page_table[p].used;
            size_t free_outside = v.pages.size() * v.per_page - v.used - (v.per_page - used);
            bool sparse = !nearly_empty_only || used * v.chunk_size * 8 <= _page_size;
            if (p != no_page && sparse && used <= free_outside + ready_above &&
                (best == no_page || used < _page_table[best].used)) {
                best = p;
                best_cls = i;
            }
        }
        if (i != cls) {
            ready_above += ready_chunks(v);
        }
    }
    return best != no_page && page_movable(_classes[best_cls], best) && move_page(best_cls, cls, best, true);
}

item* store::allocate(size_t key_len, size_t value_len) noexcept {
    unsigned cls = class_of(chunk_need(key_len, value_len));
    if (cls >= _classes.size()) {
        return nullptr;
    }
    _asked.set(cls);
    slab_class& c = _classes[cls];
    for (int attempt = 0; attempt < 4; ++attempt) {
        // After an eviction (its chunk is quarantined) memory is short: reuse early.
        if (item* it = take_chunk(c, attempt > 0)) {
            it->cls = uint8_t(cls);
            return it;
        }
        item* spilled = nullptr;
        if (!make_room(cls, &spilled)) {
            break;
        }
        if (spilled) {
            return spilled;
        }
    }
    if (item* it = take_chunk(c, true)) {
        it->cls = uint8_t(cls);
        return it;
    }
    return nullptr;
}

item* store::new_item(std::string_view key, uint32_t client_flags, uint32_t exptime,
                      size_t value_len) noexcept {
    item* it = allocate(key.size(), value_len);
    if (!it) {
        return nullptr;
    }
    it->prev = it->next = it->hash_next = nullptr;
    it->cas = 0;
    it->exptime = exptime;
    it->time = _now;
    it->client_flags = client_flags;
    it->value_len = uint32_t(value_len);
    it->key_len = uint8_t(key.size());
    it->state = 0;
    it->refs = 0;
    std::memcpy(it + 1, key.data(), key.size());
    return it;
}

void store::replace(item* old_it, item* new_it, uint64_t h) noexcept {
    unlink(old_it, h);
    link(new_it, h);
}

item* store::live(std::string_view key, uint64_t h) noexcept {
    item* it = find(key, h, nullptr);
    if (it && is_dead(it)) {
        unlink(it, h);
        return nullptr;
    }
    return it;
}

store_result store::put(store_mode mode, std::string_view key, uint64_t h, uint32_t client_flags,
                        int64_t exptime, std::string_view value, uint64_t cas_in,
                        uint64_t* cas_out) noexcept {
    ++_stats.cmd_set;
    item* old = live(key, h);
    if (item::memcached_size(key.size(), value.size()) > _cfg.max_item_size) {
        ++_stats.store_too_large;
        if (old && mode == store_mode::set) {
            unlink(old, h); // no stale value survives a failed set (memcached does the same)
        }
        return store_result::too_large;
    }
    switch (mode) {
    case store_mode::add:
        if (old) {
            bump(old);
            return store_result::not_stored;
        }
        break;
    case store_mode::replace:
    case store_mode::append:
    case store_mode::prepend:
        if (!old) {
            return store_result::not_stored;
        }
        break;
    case store_mode::cas:
        if (!old) {
            ++_stats.cas_misses;
            return store_result::not_found;
        }
        if (old->cas != cas_in) {
            ++_stats.cas_badval;
            return store_result::exists;
        }
        ++_stats.cas_hits;
        break;
    case store_mode::set:
        break;
    }
    if (cas_in && mode != store_mode::cas) {
        if (!old) {
            return store_result::not_found;
        }
        if (old->cas != cas_in) {
            return store_result::exists;
        }
    }
    if (mode == store_mode::set && old) {
        // The old value goes first, so that it never stands in the way of its own replacement
        // (its chunk and its page are free to be taken); a set that then fails leaves no stale
        // value, memcached's rule.
        unlink(old, h);
        old = nullptr;
    }
    bool concat = mode == store_mode::append || mode == store_mode::prepend;
    size_t len = value.size() + (concat ? old->value_len : 0);
    if (concat && item::memcached_size(key.size(), len) > _cfg.max_item_size) {
        ++_stats.store_no_memory;
        return store_result::no_memory;
    }
    uint32_t new_flags = concat ? old->client_flags : client_flags;
    uint32_t new_exptime = concat ? old->exptime : expiry_of(exptime);
    _pinned = old;
    item* it = new_item(key, new_flags, new_exptime, len);
    _pinned = nullptr;
    if (!it) {
        ++_stats.store_no_memory;
        if (old && mode == store_mode::set) {
            unlink(old, h);
        }
        return store_result::no_memory;
    }
    char* dst = it->value_data();
    if (mode == store_mode::append) {
        std::memcpy(dst, old->value().data(), old->value_len);
        std::memcpy(dst + old->value_len, value.data(), value.size());
    } else if (mode == store_mode::prepend) {
        std::memcpy(dst, value.data(), value.size());
        std::memcpy(dst + value.size(), old->value().data(), old->value_len);
    } else if (!value.empty()) {
        std::memcpy(dst, value.data(), value.size());
    }
    it->cas = next_cas();
    if (old) {
        replace(old, it, h);
    } else {
        link(it, h);
    }
    if (cas_out) {
        *cas_out = it->cas;
    }
    return store_result::stored;
}

item* store::reserve(std::string_view key, uint32_t client_flags, int64_t exptime, size_t value_len,
                     store_result* why) noexcept {
    if (item::memcached_size(key.size(), value_len) > _cfg.max_item_size) {
        ++_stats.store_too_large;
        *why = store_result::too_large;
        return nullptr;
    }
    item* it = new_item(key, client_flags, expiry_of(exptime), value_len);
    if (!it) {
        ++_stats.store_no_memory;
        *why = store_result::no_memory;
        return nullptr;
    }
    ref(it); // keeps it off the free list and its page from moving until commit or abandon
    return it;
}

store_result store::commit(store_mode mode, item* it, uint64_t h, uint64_t cas_in,
                           uint64_t* cas_out) noexcept {
    ++_stats.cmd_set;
    item* old = live(it->key(), h);
    store_result r = store_result::stored;
    switch (mode) {
    case store_mode::add:
        r = old ? store_result::not_stored : r;
        break;
    case store_mode::replace:
        r = old ? r : store_result::not_stored;
        break;
    case store_mode::cas:
        if (!old) {
            ++_stats.cas_misses;
            r = store_result::not_found;
        } else if (old->cas != cas_in) {
            ++_stats.cas_badval;
            r = store_result::exists;
        } else {
            ++_stats.cas_hits;
        }
        break;
    default:
        break;
    }
    if (r != store_result::stored) {
        unref(it);
        return r;
    }
    it->cas = next_cas();
    it->time = _now;
    if (old) {
        replace(old, it, h);
    } else {
        link(it, h);
    }
    unref(it);
    if (cas_out) {
        *cas_out = it->cas;
    }
    return r;
}

store_result store::reject(std::string_view key, uint64_t h, bool drop_old, store_result why) noexcept {
    ++_stats.cmd_set;
    ++(why == store_result::too_large ? _stats.store_too_large : _stats.store_no_memory);
    if (item* old = live(key, h); old && drop_old) {
        unlink(old, h);
    }
    return why;
}

store_result store::remove(std::string_view key, uint64_t h, uint64_t cas_in) noexcept {
    item* it = live(key, h);
    if (!it) {
        ++_stats.delete_misses;
        return store_result::not_found;
    }
    if (cas_in && it->cas != cas_in) {
        return store_result::exists;
    }
    ++_stats.delete_hits;
    unlink(it, h);
    return store_result::stored;
}

delta_result store::add_delta(std::string_view key, uint64_t h, bool incr, uint64_t delta, uint64_t* result,
                              uint64_t* cas_out) noexcept {
    item* it = live(key, h);
    if (!it) {
        ++(incr ? _stats.incr_misses : _stats.decr_misses);
        return delta_result::not_found;
    }
    uint64_t value = 0;
    if (it->value_len == 0 || !parse_stored_number(it->value(), &value)) {
        return delta_result::non_numeric;
    }
    if (incr) {
        value += delta;
        ++_stats.incr_hits;
    } else {
        value = delta > value ? 0 : value - delta;
        ++_stats.decr_hits;
    }
    char digits[24];
    size_t n = 0;
    do {
        digits[n++] = char('0' + value % 10);
        value /= 10;
    } while (value);
    std::reverse(digits, digits + n);
    *result = 0;
    for (size_t i = 0; i < n; ++i) {
        *result = *result * 10 + uint64_t(digits[i] - '0');
    }
    if (n <= it->value_len && it->refs == 0 && !_cfg.remote_readable) {
        // In place, padded with spaces: what memcached does when no one else holds the item.
        std::memcpy(it->value_data(), digits, n);
        std::memset(it->value_data() + n, ' ', it->value_len - n);
        it->cas = next_cas();
        bump(it);
    } else {
        _pinned = it;
        item* fresh = new_item(key, it->client_flags, it->exptime, n);
        _pinned = nullptr;
        if (!fresh) {
            ++_stats.store_no_memory;
            return delta_result::no_memory;
        }
        std::memcpy(fresh->value_data(), digits, n);
        fresh->cas = next_cas();
        replace(it, fresh, h);
        it = fresh;
    }
    if (cas_out) {
        *cas_out = it->cas;
    }
    return delta_result::ok;
}

void store::flush_all(int64_t delay) noexcept {
    ++_stats.cmd_flush;
    uint32_t new_oldest = delay > 0 ? expiry_of(delay) : _now;
    _oldest_live = new_oldest - 1;
    _flush_pending = _oldest_live > _now;
    if (!_flush_pending) {
        flush_now();
    }
}

void store::flush_now() noexcept {
    _flush_pending = false;
    // Items stored from now on, in this same second, live: they are younger than `_oldest_cas`.
    // (A deadline in the past, an absolute exptime before the start, is now too.)
    _oldest_live = _now - 1;
    _oldest_cas = next_cas();
    // The memory returns now, so that curr_items and bytes say so, and every remotely readable
    // record is invalidated (unlink zeroes its version) rather than left for a lazy check that a
    // cached READ never makes.
    for (auto& c : _classes) {
        while (c.lru_head) {
            unlink(c.lru_head);
        }
    }
}

void store::reset_stats() noexcept {
    store_stats kept;
    kept.bytes = _stats.bytes;
    kept.curr_items = _stats.curr_items;
    kept.total_malloced = _stats.total_malloced;
    kept.hash_bytes = _stats.hash_bytes;
    _stats = kept;
    for (auto& c : _classes) {
        c.evicted = 0;
    }
}

std::vector<slab_class_info> store::slab_classes() const {
    std::vector<slab_class_info> out;
    for (unsigned i = 0; i < _classes.size(); ++i) {
        const slab_class& c = _classes[i];
        if (c.pages.empty()) {
            continue;
        }
        size_t carved = 0;
        for (uint32_t p : c.pages) {
            carved += size_t(carved_end(c, p) - _page_table[p].base) / c.chunk_size;
        }
        size_t items = 0;
        for (item* it = c.lru_head; it; it = it->next) {
            ++items;
        }
        out.push_back({i + 1, c.chunk_size, c.per_page, c.pages.size(), c.used,
                       c.free_count + (c.pages.size() * c.per_page - carved), items, c.evicted,
                       c.mem_requested, c.lru_tail ? c.lru_tail->time : 0});
    }
    return out;
}

} // namespace shoal::kv
