// libFuzzer target for the memcached protocol parser and executor: the input is a byte stream
// from a client, fed in pieces (the first byte picks the piece size, so requests split at every
// possible point) to the same loop the server runs, against a small store. Asserts the
// parser's contract: consumed bytes stay within the input and a ready request's views point
// into it.
#include "kv/protocol/executor.hh"
#include "kv/protocol/protocol.hh"
#include "kv/store/hash.hh"
#include "kv/store/store.hh"

#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace shoal::kv;
    if (size == 0) {
        return 0;
    }
    size_t piece = size_t(data[0] % 64) + 1;
    std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
    store_config cfg;
    cfg.memory_limit = 2 << 20;
    cfg.max_item_size = 64 * 1024;
    store s(cfg, std::make_unique<heap_page_source>(store::page_size_for(cfg)), 1'800'000'000);
    parser_limits limits;
    limits.max_item_size = cfg.max_item_size;
    limits.max_get_line = 8192;
    std::string pending, reply;
    request req;
    uint64_t skip = 0;
    for (size_t off = 0; off < input.size(); off += piece) {
        std::string_view chunk = input.substr(off, piece);
        size_t n = size_t(std::min<uint64_t>(skip, chunk.size()));
        chunk.remove_prefix(n);
        skip -= n;
        pending.append(chunk);
        size_t pos = 0;
        bool closed = false;
        while (pos < pending.size()) {
            std::string_view in = std::string_view(pending).substr(pos);
            parse_result r = parse_request(in, req, limits);
            if (r.kind == parse_result::incomplete) {
                break;
            }
            if (r.kind == parse_result::close) {
                closed = true;
                break;
            }
            if (r.consumed == 0 || r.consumed > in.size()) {
                std::abort();
            }
            if (r.kind == parse_result::ready) {
                auto inside = [&](std::string_view v) {
                    return v.empty() ||
                           (v.data() >= in.data() && v.data() + v.size() <= in.data() + r.consumed);
                };
                if (!inside(req.key) || !inside(req.value)) {
                    std::abort();
                }
                if (is_get(req.cmd)) {
                    for (auto k : req.keys) {
                        execute_get_key(req, k, hash_key(k), s, reply);
                    }
                } else if (req.cmd != command::stats && req.cmd != command::flush_all) {
                    execute_key_command(req, hash_key(req.key), s, reply);
                } else if (req.cmd == command::flush_all) {
                    s.flush_all(req.exptime);
                }
            } else {
                reply.append(r.text);
            }
            pos += r.consumed;
            uint64_t in_pending = std::min<uint64_t>(r.skip, pending.size() - pos);
            pos += size_t(in_pending);
            skip = r.skip - in_pending;
        }
        pending.erase(0, pos);
        if (closed) {
            break;
        }
        if (reply.size() > (1 << 20)) {
            reply.clear();
        }
    }
    return 0;
}
