#include "kv/protocol/protocol.hh"

#include "kv/store/item.hh"

#include <algorithm>
#include <climits>
#include <cstring>
#include <optional>

namespace shoal::kv {

void request::reset() noexcept {
    auto k = std::move(keys);
    k.clear();
    *this = request();
    keys = std::move(k);
}

namespace {

constexpr std::string_view r_error = "ERROR\r\n";
constexpr std::string_view r_bad_format = "CLIENT_ERROR bad command line format\r\n";
constexpr std::string_view r_bad_chunk = bad_data_chunk_reply;
constexpr std::string_view r_bad_exptime = "CLIENT_ERROR invalid exptime argument\r\n";
constexpr std::string_view r_bad_delta = "CLIENT_ERROR invalid numeric delta argument\r\n";
constexpr std::string_view r_delete_usage =
    "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n";
constexpr std::string_view r_bad_token = "CLIENT_ERROR bad token in command line format\r\n";
constexpr std::string_view r_invalid_flag = "CLIENT_ERROR invalid flag\r\n";
constexpr std::string_view r_duplicate_flag = "CLIENT_ERROR duplicate flag\r\n";
constexpr std::string_view r_decode_key = "CLIENT_ERROR error decoding key\r\n";
constexpr std::string_view r_ma_flags = "CLIENT_ERROR invalid or duplicate flag\r\n";
constexpr std::string_view r_ms_mode = "CLIENT_ERROR invalid mode for ms M token\r\n";
constexpr std::string_view r_ma_mode = "CLIENT_ERROR invalid mode for ma M token\r\n";
constexpr std::string_view r_m_length = "CLIENT_ERROR incorrect length for M token\r\n";
constexpr std::string_view r_bad_initial = "CLIENT_ERROR invalid numeric initial value\r\n";
constexpr std::string_view r_bad_delta_value = "CLIENT_ERROR invalid numeric delta value\r\n";
constexpr std::string_view r_opaque_too_long = "CLIENT_ERROR opaque token too long\r\n";
constexpr std::string_view r_nothing = "";

/// memcached's longest `O` token, the flag character included.
constexpr size_t max_opaque_token = 32;

/// memcached's first byte of a binary-protocol request.
constexpr char binary_request_magic = char(0x80);

/// memcached's MAX_TOKENS: a line splits into at most this many tokens (the last one being
/// the terminal marker), the remainder stays unsplit.
constexpr size_t max_tokens = 24;

bool is_c_space(char c) noexcept {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/// strtol/strtoul/strtoull on a token (which ends where memcached's NUL would be), then the
/// checks of memcached's safe_strto* helpers: digits present, no ERANGE, and the number ends
/// at the token's end or at white space.
struct c_number {
    bool ok = false;
    bool negative = false;
    uint64_t magnitude = 0;
};

c_number parse_c_number(std::string_view t, bool is_signed) noexcept {
    c_number r;
    size_t i = 0;
    while (i < t.size() && is_c_space(t[i])) {
        ++i;
    }
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) {
        r.negative = t[i] == '-';
        ++i;
    }
    size_t digits = 0;
    bool overflow = false;
    for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i, ++digits) {
        uint64_t d = uint64_t(t[i] - '0');
        if (r.magnitude > (UINT64_MAX - d) / 10) {
            overflow = true;
        } else {
            r.magnitude = r.magnitude * 10 + d;
        }
    }
    if (digits == 0 || overflow) {
        return r;
    }
    if (is_signed) {
        uint64_t limit = r.negative ? uint64_t(INT64_MAX) + 1 : uint64_t(INT64_MAX);
        if (r.magnitude > limit) {
            return r;
        }
    }
    if (i < t.size() && !is_c_space(t[i])) {
        return r;
    }
    r.ok = true;
    return r;
}

/// safe_strtol into an int32_t, as memcached stores it (the long is truncated).
bool safe_strtol32(std::string_view t, int32_t* out) noexcept {
    c_number n = parse_c_number(t, true);
    if (!n.ok) {
        return false;
    }
    uint64_t v = n.negative ? uint64_t(0) - n.magnitude : n.magnitude;
    *out = int32_t(uint32_t(v));
    return true;
}

/// safe_strtoull.
bool safe_strtoull(std::string_view t, uint64_t* out) noexcept {
    c_number n = parse_c_number(t, false);
    if (!n.ok) {
        return false;
    }
    uint64_t v = n.negative ? uint64_t(0) - n.magnitude : n.magnitude;
    if (int64_t(v) < 0 && n.negative) {
        return false;
    }
    *out = v;
    return true;
}

/// safe_strtoul into a uint32_t (client flags, verbosity): the unsigned long is truncated.
bool safe_strtoul32(std::string_view t, uint32_t* out) noexcept {
    uint64_t v = 0;
    if (!safe_strtoull(t, &v)) {
        return false;
    }
    *out = uint32_t(v);
    return true;
}

/// The tokens of a line, split at spaces like memcached's tokenize_command.
struct tokens {
    std::string_view tok[max_tokens];
    size_t count = 0;      ///< real tokens (memcached's ntokens is count + 1)
    std::string_view rest; ///< unsplit remainder when max_tokens - 1 tokens were taken

    size_t ntokens() const noexcept { return count + 1; }
};

void tokenize(std::string_view line, tokens& t) noexcept {
    size_t i = 0;
    size_t n = line.size();
    while (i < n) {
        while (i < n && line[i] == ' ') {
            ++i;
        }
        if (i >= n) {
            break;
        }
        if (t.count == max_tokens - 1) {
            t.rest = line.substr(i);
            return;
        }
        size_t start = i;
        while (i < n && line[i] != ' ') {
            ++i;
        }
        t.tok[t.count++] = line.substr(start, i - start);
    }
}

/// memcached's set_noreply_maybe: the last token is "noreply".
bool noreply_of(const tokens& t) noexcept {
    return t.count > 0 && t.tok[t.count - 1] == "noreply";
}

parse_result reply(std::string_view text, size_t consumed, uint64_t skip = 0) noexcept {
    parse_result r;
    r.kind = parse_result::reply;
    r.text = text;
    r.consumed = consumed;
    r.skip = skip;
    return r;
}

parse_result ready(size_t consumed) noexcept {
    parse_result r;
    r.kind = parse_result::ready;
    r.consumed = consumed;
    return r;
}

/// A classic error reply, suppressed when the command said noreply (memcached's out_string).
parse_result reply_unless(bool noreply, std::string_view text, size_t consumed) noexcept {
    return reply(noreply ? r_nothing : text, consumed);
}

/// The data block of a storage command (classic or ms) whose line ends at `line_end`.
parse_result data_block(std::string_view in, size_t line_end, request& out, int32_t vlen,
                        const parser_limits& limits, bool noreply) noexcept {
    out.data_len = uint64_t(vlen);
    if (item::memcached_size(out.key.size(), size_t(vlen)) > limits.max_item_size) {
        out.too_large = true;
        parse_result r = ready(line_end);
        r.skip = uint64_t(vlen) + 2;
        return r;
    }
    size_t need = line_end + size_t(vlen) + 2;
    if (in.size() < need) {
        parse_result r;
        r.value_at = line_end;
        return r;
    }
    if (in[need - 2] != '\r' || in[need - 1] != '\n') {
        return reply_unless(noreply, r_bad_chunk, need);
    }
    out.value = in.substr(line_end, size_t(vlen));
    return ready(need);
}

parse_result parse_storage(std::string_view in, size_t line_end, const tokens& t, request& out,
                           const parser_limits& limits) {
    bool is_cas = out.cmd == command::cas;
    size_t nt = t.ntokens();
    if (is_cas ? (nt != 7 && nt != 8) : (nt != 6 && nt != 7)) {
        return reply(r_error, line_end);
    }
    out.noreply = noreply_of(t);
    out.key = t.tok[1];
    if (out.key.size() > max_key_length) {
        return reply_unless(out.noreply, r_bad_format, line_end);
    }
    int32_t exptime = 0;
    int32_t vlen = 0;
    if (!safe_strtoul32(t.tok[2], &out.client_flags) || !safe_strtol32(t.tok[3], &exptime) ||
        !safe_strtol32(t.tok[4], &vlen)) {
        return reply_unless(out.noreply, r_bad_format, line_end);
    }
    out.exptime = exptime;
    if (is_cas && !safe_strtoull(t.tok[5], &out.cas_unique)) {
        return reply_unless(out.noreply, r_bad_format, line_end);
    }
    if (vlen < 0 || vlen > INT_MAX - 2) {
        return reply_unless(out.noreply, r_bad_format, line_end);
    }
    return data_block(in, line_end, out, vlen, limits, out.noreply);
}

parse_result parse_get(size_t line_end, const tokens& t, request& out) {
    size_t first = 1;
    if (out.cmd == command::gat || out.cmd == command::gats) {
        int32_t exptime = 0;
        if (!safe_strtol32(t.tok[1], &exptime)) {
            return reply(r_bad_exptime, line_end);
        }
        out.exptime = exptime;
        first = 2;
    }
    for (size_t i = first; i < t.count; ++i) {
        out.keys.push_back(t.tok[i]);
    }
    // Keys past memcached's token limit are split the same way, in further rounds.
    std::string_view rest = t.rest;
    while (!rest.empty()) {
        size_t sp = rest.find(' ');
        std::string_view k = rest.substr(0, sp);
        if (!k.empty()) {
            out.keys.push_back(k);
        }
        rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
    }
    for (auto k : out.keys) {
        if (k.size() > max_key_length) {
            return reply(r_bad_format, line_end);
        }
    }
    if (!out.keys.empty()) {
        out.key = out.keys.front();
    }
    return ready(line_end);
}

/// The argument of meta flag `o` (N T F C M J D; `tok` is the flag and its argument) into `out`:
/// nullopt when it is fine, else the error it leaves (the flags are parsed on; the last error is
/// the reply). `fallback`: F's error.
std::optional<std::string_view> meta_flag_argument(char o, std::string_view tok, request& out,
                                                   std::string_view fallback) {
    std::string_view arg = tok.substr(1);
    switch (o) {
    case 'N':
    case 'T': {
        int32_t v = 0;
        if (!safe_strtol32(arg, &v)) {
            return r_bad_token;
        }
        if (o == 'N') {
            out.vivify = true;
            out.vivify_ttl = v;
        } else {
            out.has_ttl = true;
            out.exptime = v;
        }
        return std::nullopt;
    }
    case 'F':
        return safe_strtoul32(arg, &out.client_flags) ? std::nullopt : std::optional(fallback);
    case 'C':
        return safe_strtoull(arg, &out.cas_unique) ? std::nullopt : std::optional(r_bad_token);
    case 'M':
        if (tok.size() != 2) {
            return r_m_length;
        }
        out.mode = tok[1];
        return std::nullopt;
    case 'J':
        return safe_strtoull(arg, &out.initial) ? std::nullopt : std::optional(r_bad_initial);
    default: // 'D'
        return safe_strtoull(arg, &out.delta) ? std::nullopt : std::optional(r_bad_delta_value);
    }
}

/// memcached's _meta_flag_preparse over the tokens from `start`; "" when the flags are fine,
/// else the error reply (`fallback` when memcached leaves its default error string).
std::string_view parse_meta_flags(const tokens& t, size_t start, request& out, std::string_view fallback) {
    bool seen[128] = {};
    std::string_view err;
    for (size_t i = start; i < t.count; ++i) {
        std::string_view tok = t.tok[i];
        auto o = uint8_t(tok[0]);
        if (o >= 127 || seen[o]) {
            return r_duplicate_flag;
        }
        seen[o] = true;
        switch (o) {
        case 'b':
            return r_decode_key; // base64 keys are not supported: memcached's decode error
        case 'N':
        case 'T':
        case 'F':
        case 'C':
        case 'M':
        case 'J':
        case 'D':
            if (std::optional<std::string_view> e = meta_flag_argument(char(o), tok, out, fallback)) {
                err = *e;
            }
            break;
        case 'R':
        case 'P':
        case 'L':
        case 'I':
            break;
        case 'O':
            if (tok.size() > max_opaque_token) {
                return r_opaque_too_long;
            }
            out.opaque = tok;
            out.returns[out.return_count++] = 'O';
            break;
        case 'k':
        case 's':
        case 't':
        case 'c':
        case 'f':
        case 'h':
        case 'l':
            out.returns[out.return_count++] = char(o);
            break;
        case 'v':
            out.want_value = true;
            break;
        case 'u':
            out.no_bump = true;
            break;
        case 'q':
            out.noreply = true;
            break;
        default:
            return r_invalid_flag;
        }
    }
    return err;
}

/// md and ma answer every flag error with one text, except an opaque token too long.
std::string_view md_ma_error(std::string_view err) noexcept {
    return err == r_opaque_too_long ? err : r_ma_flags;
}

/// ma's mode normalized (I or D); false for a mode ma does not know (`mode` unchanged).
bool normalize_ma_mode(char& mode) noexcept {
    switch (mode) {
    case 'I':
    case 'i':
    case '+':
        mode = 'I';
        return true;
    case 'D':
    case 'd':
    case '-':
        mode = 'D';
        return true;
    default:
        return false;
    }
}

/// ms's mode normalized (S E A P R); false for a mode ms does not know (`mode` unchanged).
bool normalize_ms_mode(char& mode) noexcept {
    switch (mode) {
    case 'S':
    case 's':
        mode = 'S';
        return true;
    case 'E':
    case 'e':
        mode = 'E';
        return true;
    case 'A':
    case 'a':
        mode = 'A';
        return true;
    case 'P':
    case 'p':
        mode = 'P';
        return true;
    case 'R':
    case 'r':
        mode = 'R';
        return true;
    default:
        return false;
    }
}

/// ms: its line (key checked), then its data block.
parse_result parse_ms(std::string_view in, size_t line_end, const tokens& t, request& out,
                      const parser_limits& limits) {
    out.cmd = command::ms;
    if (t.ntokens() == 3) {
        return reply(r_bad_format, line_end);
    }
    int32_t vlen = 0;
    if (!safe_strtol32(t.tok[2], &vlen) || vlen < 0 || vlen > INT_MAX - 2) {
        return reply(r_bad_format, line_end);
    }
    out.mode = 'S';
    auto err = parse_meta_flags(t, 3, out, r_bad_format);
    if (err.empty() && !normalize_ms_mode(out.mode)) {
        err = r_ms_mode;
    }
    if (!err.empty()) {
        // memcached swallows the data block after a bad ms line.
        return reply(err, line_end, uint64_t(vlen) + 2);
    }
    return data_block(in, line_end, out, vlen, limits, false);
}

parse_result parse_meta(std::string_view in, size_t line_end, const tokens& t, request& out,
                        const parser_limits& limits) {
    char which = t.tok[0][1];
    if (which == 'n') {
        out.cmd = command::mn;
        return ready(line_end);
    }
    if (which != 'g' && which != 's' && which != 'd' && which != 'a') {
        return reply(r_error, line_end);
    }
    if (t.ntokens() < 3) {
        return reply(r_error, line_end);
    }
    out.key = t.tok[1];
    if (out.key.size() > max_key_length) {
        return reply(r_bad_format, line_end);
    }
    switch (which) {
    case 'g': {
        out.cmd = command::mg;
        auto err = parse_meta_flags(t, 2, out, r_bad_format);
        return err.empty() ? ready(line_end) : reply(err, line_end);
    }
    case 'd': {
        out.cmd = command::md;
        auto err = parse_meta_flags(t, 2, out, r_bad_format);
        return err.empty() ? ready(line_end) : reply(md_ma_error(err), line_end);
    }
    case 'a': {
        out.cmd = command::ma;
        out.mode = 'I';
        if (auto err = parse_meta_flags(t, 2, out, r_bad_format); !err.empty()) {
            return reply(md_ma_error(err), line_end);
        }
        return normalize_ma_mode(out.mode) ? ready(line_end) : reply(r_ma_mode, line_end);
    }
    default:
        return parse_ms(in, line_end, t, out, limits);
    }
}

parse_result close_connection() noexcept {
    parse_result r;
    r.kind = parse_result::close;
    return r;
}

/// Whether the line has from `lo` to `hi` of memcached's ntokens.
bool ntokens_in(const tokens& t, size_t lo, size_t hi) noexcept {
    return t.ntokens() >= lo && t.ntokens() <= hi;
}

/// Input `in` without a line end yet: wait for more, or close when the line is too long already.
parse_result without_line_end(std::string_view in, const parser_limits& limits) noexcept {
    if (in.size() <= limits.max_line) {
        return parse_result{};
    }
    // Only a large multi-get may have a line this long (memcached's rule).
    size_t sp = in.find_first_not_of(' ');
    std::string_view head = in.substr(std::min(sp, in.size()));
    bool is_get_line = sp <= 100 && (head.substr(0, 4) == "get " || head.substr(0, 5) == "gets ");
    if (is_get_line && in.size() <= limits.max_get_line) {
        return parse_result{};
    }
    return close_connection();
}

/// A command starting with 'g': get, gets, gat and gats.
parse_result parse_get_command(std::string_view c, size_t line_end, const tokens& t, request& out) {
    if (c == "get") {
        out.cmd = command::get;
    } else if (c == "gets") {
        out.cmd = command::gets;
    } else if (c == "gat") {
        out.cmd = command::gat;
    } else if (c == "gats") {
        out.cmd = command::gats;
    } else {
        return reply(r_error, line_end);
    }
    if (t.ntokens() < 3) {
        return reply(r_error, line_end);
    }
    return parse_get(line_end, t, out);
}

/// incr and decr.
parse_result parse_delta(std::string_view c, size_t line_end, const tokens& t, request& out) {
    if (!ntokens_in(t, 4, 5)) {
        return reply(r_error, line_end);
    }
    out.cmd = c == "incr" ? command::incr : command::decr;
    out.noreply = noreply_of(t);
    out.key = t.tok[1];
    if (out.key.size() > max_key_length) {
        return reply_unless(out.noreply, r_bad_format, line_end);
    }
    if (!safe_strtoull(t.tok[2], &out.delta)) {
        return reply_unless(out.noreply, r_bad_delta, line_end);
    }
    return ready(line_end);
}

parse_result parse_delete(size_t line_end, const tokens& t, request& out) {
    size_t nt = t.ntokens();
    if (!ntokens_in(t, 3, 5)) {
        return reply(r_error, line_end);
    }
    out.cmd = command::del;
    if (nt > 3) {
        bool hold_is_zero = t.tok[2] == "0";
        bool sets_noreply = noreply_of(t);
        out.noreply = sets_noreply;
        bool valid = (nt == 4 && (hold_is_zero || sets_noreply)) || (nt == 5 && hold_is_zero && sets_noreply);
        if (!valid) {
            return reply_unless(out.noreply, r_delete_usage, line_end);
        }
    }
    out.key = t.tok[1];
    if (out.key.size() > max_key_length) {
        return reply_unless(out.noreply, r_bad_format, line_end);
    }
    return ready(line_end);
}

parse_result parse_touch(size_t line_end, const tokens& t, request& out) {
    if (!ntokens_in(t, 4, 5)) {
        return reply(r_error, line_end);
    }
    out.cmd = command::touch;
    out.noreply = noreply_of(t);
    out.key = t.tok[1];
    if (out.key.size() > max_key_length) {
        return reply_unless(out.noreply, r_bad_format, line_end);
    }
    int32_t exptime = 0;
    if (!safe_strtol32(t.tok[2], &exptime)) {
        return reply_unless(out.noreply, r_bad_exptime, line_end);
    }
    out.exptime = exptime;
    return ready(line_end);
}

/// The commands about no key (flush_all, stats, version, verbosity, quit), else an error (or a
/// hang-up for an HTTP request line).
parse_result parse_keyless(std::string_view c, size_t line_end, const tokens& t, request& out) {
    if (c == "flush_all") {
        if (!ntokens_in(t, 2, 4)) {
            return reply(r_error, line_end);
        }
        out.cmd = command::flush_all;
        out.noreply = noreply_of(t);
        if (t.ntokens() != (out.noreply ? 3u : 2u)) {
            int32_t exptime = 0;
            if (!safe_strtol32(t.tok[1], &exptime)) {
                return reply_unless(out.noreply, r_bad_exptime, line_end);
            }
            out.exptime = exptime;
        }
        return ready(line_end);
    }
    if (c == "stats") {
        out.cmd = command::stats;
        if (t.count > 1) {
            out.arg = t.tok[1];
        }
        return ready(line_end);
    }
    if (c == "version") {
        out.cmd = command::version;
        return ready(line_end);
    }
    if (c == "verbosity") {
        if (!ntokens_in(t, 3, 4)) {
            return reply(r_error, line_end);
        }
        out.cmd = command::verbosity;
        out.noreply = noreply_of(t);
        uint32_t level = 0;
        if (!safe_strtoul32(t.tok[1], &level)) {
            return reply_unless(out.noreply, r_bad_format, line_end);
        }
        return ready(line_end);
    }
    if (c == "quit") {
        out.cmd = command::quit;
        return ready(line_end);
    }
    if (t.tok[t.count - 1].substr(0, 5) == "HTTP/") {
        return close_connection(); // an HTTP request line: memcached hangs up on it too
    }
    return reply(r_error, line_end);
}

} // namespace

parse_result parse_request(std::string_view in, request& out, const parser_limits& limits) {
    out.reset();
    if (!in.empty() && in[0] == binary_request_magic) {
        // A binary-protocol client: without binary support no reply can be framed for it, and
        // waiting for a line end would hang it. Closing tells it at once.
        return close_connection();
    }
    size_t nl = in.find('\n');
    if (nl == std::string_view::npos) {
        return without_line_end(in, limits);
    }
    size_t line_end = nl + 1;
    std::string_view line = in.substr(0, nl);
    if (line.size() > 1 && line.back() == '\r') {
        line.remove_suffix(1);
    }
    if (size_t nul = line.find('\0'); nul != std::string_view::npos) {
        line = line.substr(0, nul);
    }
    tokens t;
    tokenize(line, t);
    if (t.count == 0 || t.tok[0].size() < 2) {
        return reply(r_error, line_end);
    }
    std::string_view c = t.tok[0];
    if (c[0] == 'm' && c.size() == 2) {
        return parse_meta(in, line_end, t, out, limits);
    }
    if (c[0] == 'g') {
        return parse_get_command(c, line_end, t, out);
    }
    if (c == "set" || c == "add" || c == "replace" || c == "append" || c == "prepend" || c == "cas") {
        out.cmd = c == "set"       ? command::set
                  : c == "add"     ? command::add
                  : c == "replace" ? command::replace
                  : c == "append"  ? command::append
                  : c == "prepend" ? command::prepend
                                   : command::cas;
        return parse_storage(in, line_end, t, out, limits);
    }
    if (c == "incr" || c == "decr") {
        return parse_delta(c, line_end, t, out);
    }
    if (c == "delete") {
        return parse_delete(line_end, t, out);
    }
    if (c == "touch") {
        return parse_touch(line_end, t, out);
    }
    return parse_keyless(c, line_end, t, out);
}

} // namespace shoal::kv
