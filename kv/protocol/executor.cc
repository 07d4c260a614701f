#include "kv/protocol/executor.hh"

#include <charconv>

namespace shoal::kv {

void append_number(std::string& out, uint64_t n) {
    char buf[24];
    auto res = std::to_chars(buf, buf + sizeof(buf), n);
    out.append(buf, size_t(res.ptr - buf));
}

namespace {

void append_signed(std::string& out, int64_t n) {
    char buf[24];
    auto res = std::to_chars(buf, buf + sizeof(buf), n);
    out.append(buf, size_t(res.ptr - buf));
}

/// What a meta command reports about an item, read before the command changes it.
struct item_view {
    uint64_t cas = 0;
    uint32_t client_flags = 0;
    uint32_t value_len = 0;
    uint32_t exptime = 0;
    uint32_t time = 0;
    bool fetched = false;
};

item_view view_of(const item* it) {
    return {it->cas, it->client_flags, it->value_len, it->exptime, it->time, bool(it->state & item::fetched)};
}

/// The remaining TTL as meta commands report it.
int64_t ttl_of(uint32_t exptime, uint32_t now) {
    return exptime == 0 ? -1 : int64_t(exptime) - int64_t(now);
}

/// Appends the return flags of a meta command in request order; `v` is null on a miss (then
/// only O and k are returned, as memcached does).
void append_meta_flags(const request& r, const item_view* v, uint32_t now, std::string& out) {
    for (uint8_t i = 0; i < r.return_count; ++i) {
        char f = r.returns[i];
        if (f == 'O') {
            out += ' ';
            out.append(r.opaque);
            continue;
        }
        if (f == 'k') {
            out += " k";
            out.append(r.key);
            continue;
        }
        if (!v) {
            continue;
        }
        out += ' ';
        out += f;
        switch (f) {
        case 'c':
            append_number(out, v->cas);
            break;
        case 'f':
            append_number(out, v->client_flags);
            break;
        case 's':
            append_number(out, v->value_len);
            break;
        case 't':
            append_signed(out, ttl_of(v->exptime, now));
            break;
        case 'h':
            out += v->fetched ? '1' : '0';
            break;
        case 'l':
            append_number(out, now >= v->time ? now - v->time : 0);
            break;
        default:
            break;
        }
    }
    out += "\r\n";
}

void execute_mg(const request& r, uint64_t h, store& s, std::string& out) {
    item* it = s.peek(r.key, h);
    if (!it) {
        s.get(r.key, h); // counts the miss (and reclaims a dead item)
        if (!r.noreply) {
            out += "EN";
            append_meta_flags(r, nullptr, s.now(), out);
        }
        return;
    }
    item_view v = view_of(it);
    if (r.has_ttl) {
        s.set_exptime(it, r.exptime);
        v.exptime = it->exptime;
    }
    if (r.no_bump) {
        ++s.stats().cmd_get;
        ++s.stats().get_hits;
    } else {
        s.get(r.key, h);
    }
    if (r.want_value) {
        out += "VA ";
        append_number(out, v.value_len);
    } else {
        out += "HD";
    }
    append_meta_flags(r, &v, s.now(), out);
    if (r.want_value) {
        out.append(it->value());
        out += "\r\n";
    }
}

/// A storage request whose block was skipped (too large, or no memory for it), counted and
/// answered as memcached does (a failed set unlinks the old value); `stored` when it was not.
store_result refused(const request& r, uint64_t h, store& s, store_mode mode) noexcept {
    if (r.too_large || r.no_memory) {
        return s.reject(r.key, h, mode == store_mode::set,
                        r.too_large ? store_result::too_large : store_result::no_memory);
    }
    return store_result::stored;
}

void execute_ms(const request& r, uint64_t h, store& s, std::string& out) {
    store_mode mode = store_mode::set;
    switch (r.mode) {
    case 'E':
        mode = store_mode::add;
        break;
    case 'A':
        mode = store_mode::append;
        break;
    case 'P':
        mode = store_mode::prepend;
        break;
    case 'R':
        mode = store_mode::replace;
        break;
    default:
        break;
    }
    if (r.cas_unique && mode == store_mode::set) {
        mode = store_mode::cas;
    }
    uint64_t cas = 0;
    store_result res = refused(r, h, s, mode);
    if (res == store_result::stored) {
        res = s.put(mode, r.key, h, r.client_flags, r.has_ttl ? r.exptime : 0, r.value, r.cas_unique, &cas);
    }
    switch (res) {
    case store_result::stored:
        if (r.noreply) {
            return;
        }
        out += "HD";
        break;
    case store_result::not_stored:
        out += "NS";
        break;
    case store_result::exists:
        out += "EX";
        break;
    case store_result::not_found:
        out += "NF";
        break;
    case store_result::too_large:
        out += "SERVER_ERROR object too large for cache\r\n";
        return;
    case store_result::no_memory:
        out += "SERVER_ERROR out of memory storing object\r\n";
        return;
    }
    item_view v;
    v.cas = cas;
    for (uint8_t i = 0; i < r.return_count; ++i) {
        char f = r.returns[i];
        if (f == 'O') {
            out += ' ';
            out.append(r.opaque);
        } else if (f == 'k') {
            out += " k";
            out.append(r.key);
        } else if (f == 'c') {
            out += " c";
            append_number(out, cas);
        }
    }
    out += "\r\n";
}

void execute_md(const request& r, uint64_t h, store& s, std::string& out) {
    store_result res = s.remove(r.key, h, r.cas_unique);
    if (res == store_result::stored && r.noreply) {
        return;
    }
    out += res == store_result::stored ? "HD" : res == store_result::exists ? "EX" : "NF";
    append_meta_flags(r, nullptr, s.now(), out);
}

void execute_ma(const request& r, uint64_t h, store& s, std::string& out) {
    bool incr = r.mode != 'D';
    if (r.cas_unique) {
        item* it = s.peek(r.key, h);
        if (it && it->cas != r.cas_unique) {
            out += "EX";
            append_meta_flags(r, nullptr, s.now(), out);
            return;
        }
    }
    uint64_t number = 0;
    delta_result res = s.add_delta(r.key, h, incr, r.delta, &number);
    if (res == delta_result::not_found && r.vivify) {
        std::string digits;
        append_number(digits, r.initial);
        if (s.put(store_mode::add, r.key, h, 0, r.vivify_ttl, digits) == store_result::stored) {
            number = r.initial;
            res = delta_result::ok;
        }
    }
    switch (res) {
    case delta_result::non_numeric:
        out += "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
        return;
    case delta_result::no_memory:
        out += "SERVER_ERROR out of memory\r\n";
        return;
    case delta_result::not_found:
        out += "NF";
        append_meta_flags(r, nullptr, s.now(), out);
        return;
    case delta_result::ok:
        break;
    }
    item* it = s.peek(r.key, h);
    if (it && r.has_ttl) {
        s.set_exptime(it, r.exptime);
    }
    if (r.noreply) {
        return;
    }
    std::string digits;
    append_number(digits, number);
    if (r.want_value) {
        out += "VA ";
        append_number(out, digits.size());
    } else {
        out += "HD";
    }
    if (it) {
        item_view v = view_of(it);
        append_meta_flags(r, &v, s.now(), out);
    } else {
        append_meta_flags(r, nullptr, s.now(), out);
    }
    if (r.want_value) {
        out += digits;
        out += "\r\n";
    }
}

store_mode mode_of(command c) {
    switch (c) {
    case command::add:
        return store_mode::add;
    case command::replace:
        return store_mode::replace;
    case command::append:
        return store_mode::append;
    case command::prepend:
        return store_mode::prepend;
    case command::cas:
        return store_mode::cas;
    default:
        return store_mode::set;
    }
}

/// Appends memcached's reply to classic storage request `r` that ended as `res`.
void append_storage_reply(const request& r, store_result res, std::string& out) {
    if (r.noreply) {
        return;
    }
    switch (res) {
    case store_result::stored:
        out += "STORED\r\n";
        break;
    case store_result::not_stored:
        out += "NOT_STORED\r\n";
        break;
    case store_result::exists:
        out += "EXISTS\r\n";
        break;
    case store_result::not_found:
        out += "NOT_FOUND\r\n";
        break;
    case store_result::too_large:
        out += "SERVER_ERROR object too large for cache\r\n";
        break;
    case store_result::no_memory:
        out += "SERVER_ERROR out of memory storing object\r\n";
        break;
    }
}

void execute_storage(const request& r, uint64_t h, store& s, std::string& out) {
    store_mode mode = mode_of(r.cmd);
    store_result res = refused(r, h, s, mode);
    if (res == store_result::stored) {
        res = s.put(mode, r.key, h, r.client_flags, r.exptime, r.value, r.cas_unique);
    }
    append_storage_reply(r, res, out);
}

} // namespace

void execute_get_key(const request& r, std::string_view key, uint64_t h, store& s, std::string& out,
                     item** held, size_t zero_copy_min) {
    if (held) {
        *held = nullptr;
    }
    bool touch = r.cmd == command::gat || r.cmd == command::gats;
    item* it = touch ? s.get_and_touch(key, h, r.exptime) : s.get(key, h);
    if (!it) {
        return;
    }
    out += "VALUE ";
    out.append(key);
    out += ' ';
    append_number(out, it->client_flags);
    out += ' ';
    append_number(out, it->value_len);
    if (r.cmd == command::gets || r.cmd == command::gats) {
        out += ' ';
        append_number(out, it->cas);
    }
    out += "\r\n";
    if (held && it->value_len >= zero_copy_min && s.ref(it)) {
        *held = it;
        return;
    }
    out.append(it->value());
    out += "\r\n";
}

void execute_key_command(const request& r, uint64_t h, store& s, std::string& out) {
    switch (r.cmd) {
    case command::set:
    case command::add:
    case command::replace:
    case command::append:
    case command::prepend:
    case command::cas:
        execute_storage(r, h, s, out);
        return;
    case command::del: {
        store_result res = s.remove(r.key, h);
        if (!r.noreply) {
            out += res == store_result::stored ? "DELETED\r\n" : "NOT_FOUND\r\n";
        }
        return;
    }
    case command::incr:
    case command::decr: {
        uint64_t n = 0;
        delta_result res = s.add_delta(r.key, h, r.cmd == command::incr, r.delta, &n);
        if (r.noreply) {
            return;
        }
        switch (res) {
        case delta_result::ok:
            append_number(out, n);
            out += "\r\n";
            break;
        case delta_result::not_found:
            out += "NOT_FOUND\r\n";
            break;
        case delta_result::non_numeric:
            out += "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
            break;
        case delta_result::no_memory:
            out += "SERVER_ERROR out of memory\r\n";
            break;
        }
        return;
    }
    case command::touch: {
        bool found = s.touch(r.key, h, r.exptime);
        if (!r.noreply) {
            out += found ? "TOUCHED\r\n" : "NOT_FOUND\r\n";
        }
        return;
    }
    case command::mg:
        ++s.stats().cmd_meta;
        execute_mg(r, h, s, out);
        return;
    case command::ms:
        ++s.stats().cmd_meta;
        execute_ms(r, h, s, out);
        return;
    case command::md:
        ++s.stats().cmd_meta;
        execute_md(r, h, s, out);
        return;
    case command::ma:
        ++s.stats().cmd_meta;
        execute_ma(r, h, s, out);
        return;
    default:
        return;
    }
}

bool links_landed_value(const request& r) noexcept {
    return r.cmd == command::set || r.cmd == command::add || r.cmd == command::replace ||
           r.cmd == command::cas;
}

void execute_landed_storage(const request& r, uint64_t h, item* landed, store& s, std::string& out) {
    append_storage_reply(r, s.commit(mode_of(r.cmd), landed, h, r.cas_unique, nullptr), out);
}

} // namespace shoal::kv
