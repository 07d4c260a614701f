#include "apps/kv/reply_reader.hh"

#include <charconv>

namespace shoal::kv_app {

reply_info next_reply(std::string_view in, bool multi_line) noexcept {
    reply_info r;
    size_t pos = 0;
    for (;;) {
        size_t nl = in.find('\n', pos);
        if (nl == std::string_view::npos) {
            return reply_info{};
        }
        std::string_view line = in.substr(pos, nl - pos);
        size_t after = nl + 1;
        bool is_error =
            line.starts_with("ERROR") || line.starts_with("CLIENT_ERROR") || line.starts_with("SERVER_ERROR");
        if (!multi_line || is_error || !line.starts_with("VALUE ")) {
            r.error = is_error;
            r.bytes = after;
            return r;
        }
        // VALUE <key> <flags> <bytes> [<cas>]
        size_t p = 6;
        for (int skip = 0; skip < 2; ++skip) {
            p = line.find(' ', p);
            if (p == std::string_view::npos) {
                r.error = true;
                r.bytes = after;
                return r;
            }
            ++p;
        }
        size_t len = 0;
        std::from_chars(line.data() + p, line.data() + line.size(), len);
        if (in.size() < after + len + 2) {
            return reply_info{};
        }
        if (r.values++ == 0) {
            r.value_at = after;
            r.value_len = len;
        }
        pos = after + len + 2;
    }
}

} // namespace shoal::kv_app
