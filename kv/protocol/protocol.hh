#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace shoal::kv {

/// Longest key memcached accepts.
constexpr size_t max_key_length = 250;

/// A memcached text-protocol command.
enum class command : uint8_t {
    none,
    get,
    gets,
    gat,
    gats,
    set,
    add,
    replace,
    append,
    prepend,
    cas,
    del,
    incr,
    decr,
    touch,
    flush_all,
    stats,
    version,
    verbosity,
    quit,
    mg,
    ms,
    md,
    ma,
    mn,
};

/// True for the commands that read keys only (get, gets, gat, gats).
inline bool is_get(command c) noexcept {
    return c >= command::get && c <= command::gats;
}
/// True for the storage commands followed by a data block (set ... cas).
inline bool is_storage(command c) noexcept {
    return c >= command::set && c <= command::cas;
}

/// One parsed request. Its views point into the parsed input, which must outlive it.
struct request {
    command cmd = command::none;
    bool noreply = false;   ///< `noreply` (classic) or the meta `q` flag
    bool too_large = false; ///< storage command whose data block is skipped (too large)
    bool no_memory = false; ///< storage command refused for want of memory (block skipped)
    uint32_t client_flags = 0;
    int64_t exptime = 0;                ///< also gat's and meta T's ttl
    uint64_t cas_unique = 0;            ///< `cas`'s unique; meta `C`
    uint64_t delta = 1;                 ///< incr/decr, meta `D`
    std::string_view key;               ///< single-key commands; the first key of a get
    std::vector<std::string_view> keys; ///< get family: every key, in order
    std::string_view value;             ///< storage: the data block without its CRLF
    std::string_view arg;               ///< stats: the subcommand line; flush_all: unused
    // Meta commands.
    std::string_view opaque; ///< `O` token
    char returns[16] = {};   ///< return flags in request order (c f h k l O s t b)
    uint8_t return_count = 0;
    bool want_value = false; ///< `v`
    bool has_ttl = false;    ///< `T` given (mg: touch; ms: exptime; ma: on create)
    bool no_bump = false;    ///< `u`
    bool vivify = false;     ///< ma `N`
    int64_t vivify_ttl = 0;
    uint64_t initial = 0; ///< ma `J`
    char mode = 0;        ///< ms `M` (S E A P R) / ma `M` (I D), normalized
    /// The requested data length (storage commands), the bytes to skip when `too_large`.
    uint64_t data_len = 0;

    /// Clears everything for the next parse (keeps the keys' capacity).
    void reset() noexcept;
};

/// Limits the parser enforces.
struct parser_limits {
    /// Largest item as memcached accounts it (-I): a larger data block is skipped, not buffered.
    size_t max_item_size = 1 << 20;
    /// A line without '\n' longer than this closes the connection, as memcached does.
    size_t max_line = 2048;
    /// ... except a get line, which may grow to this before the connection is closed.
    size_t max_get_line = 1 << 20;
};

/// What `parse_request` found at the front of the input.
struct parse_result {
    enum kind_t : uint8_t {
        incomplete, ///< more bytes are needed (nothing consumed)
        ready,      ///< a request: execute it, then drop `consumed` bytes
        reply,      ///< an error: send `text`, drop `consumed` bytes, then skip `skip` more
        close,      ///< close the connection without a reply (memcached's response too)
    };
    kind_t kind = incomplete;
    size_t consumed = 0;
    /// Bytes after `consumed` to discard without buffering them (a data block memcached
    /// swallows: too large, or following a bad meta command).
    uint64_t skip = 0;
    std::string_view text; ///< `reply`: the reply, CRLF included (static storage)
    /// `incomplete` storage request whose line is complete: where its data block starts (the
    /// line is parsed into the request, whose `data_len` says the block's size without its
    /// CRLF). 0 otherwise. A server may take the block as it arrives instead of buffering it.
    size_t value_at = 0;
};

/// memcached's reply to a data block that does not end in CRLF.
constexpr std::string_view bad_data_chunk_reply = "CLIENT_ERROR bad data chunk\r\n";

/// Parses the request at the front of `in` into `out` the way memcached 1.6 does: the line
/// (ending in LF or CRLF, cut at a NUL), its tokens, numbers with memcached's strtol/strtoul
/// rules, key lengths, and for storage commands the data block and its CRLF. Pure: no I/O and
/// no state besides `out`, so it runs standalone (fuzz target, unit tests).
parse_result parse_request(std::string_view in, request& out, const parser_limits& limits);

} // namespace shoal::kv
