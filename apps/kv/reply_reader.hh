#pragma once

#include <cstddef>
#include <string_view>

namespace shoal::kv_app {

/// One complete memcached reply found at the front of a client's input.
struct reply_info {
    size_t bytes = 0;     ///< length of the reply (0: incomplete, read more)
    unsigned values = 0;  ///< VALUE/VA blocks in it (hits of a get)
    bool error = false;   ///< ERROR, CLIENT_ERROR or SERVER_ERROR
    size_t value_at = 0;  ///< where the first VALUE block's data starts in the reply
    size_t value_len = 0; ///< and its length
};

/// Finds the end of the reply at the front of `in`: for a retrieval (`multi_line`) the VALUE
/// blocks up to END, else one line. Client side of the text protocol, for the benchmark and the
/// CLI; it trusts the server's lengths.
reply_info next_reply(std::string_view in, bool multi_line) noexcept;

} // namespace shoal::kv_app
