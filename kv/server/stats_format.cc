#include "kv/server/stats_format.hh"

#include "kv/protocol/executor.hh"

#include <map>

#include <fmt/core.h>

namespace shoal::kv {

namespace {

void stat(std::string& out, std::string_view name, uint64_t v) {
    out += "STAT ";
    out.append(name);
    out += ' ';
    append_number(out, v);
    out += "\r\n";
}

void stat(std::string& out, std::string_view name, std::string_view v) {
    out += "STAT ";
    out.append(name);
    out += ' ';
    out.append(v);
    out += "\r\n";
}

} // namespace

void format_general_stats(const store_stats& s, const connection_stats& c, const server_info& info,
                          std::string& out) {
    stat(out, "pid", info.pid);
    stat(out, "uptime", info.uptime);
    stat(out, "time", info.now);
    stat(out, "version", protocol_version);
    stat(out, "pointer_size", 64);
    stat(out, "max_connections", info.max_connections);
    stat(out, "curr_connections", c.curr_connections);
    stat(out, "total_connections", c.total_connections);
    stat(out, "rejected_connections", c.rejected_connections);
    stat(out, "cmd_get", s.cmd_get);
    stat(out, "cmd_set", s.cmd_set);
    stat(out, "cmd_flush", s.cmd_flush);
    stat(out, "cmd_touch", s.cmd_touch);
    stat(out, "cmd_meta", s.cmd_meta);
    stat(out, "get_hits", s.get_hits);
    stat(out, "get_misses", s.get_misses);
    stat(out, "get_expired", s.get_expired);
    stat(out, "get_flushed", s.get_flushed);
    stat(out, "delete_misses", s.delete_misses);
    stat(out, "delete_hits", s.delete_hits);
    stat(out, "incr_misses", s.incr_misses);
    stat(out, "incr_hits", s.incr_hits);
    stat(out, "decr_misses", s.decr_misses);
    stat(out, "decr_hits", s.decr_hits);
    stat(out, "cas_misses", s.cas_misses);
    stat(out, "cas_hits", s.cas_hits);
    stat(out, "cas_badval", s.cas_badval);
    stat(out, "touch_hits", s.touch_hits);
    stat(out, "touch_misses", s.touch_misses);
    stat(out, "store_too_large", s.store_too_large);
    stat(out, "store_no_memory", s.store_no_memory);
    stat(out, "bytes_read", c.bytes_read);
    stat(out, "bytes_written", c.bytes_written);
    stat(out, "idle_kicks", c.idle_kicks);
    stat(out, "incomplete_value_bytes", c.landing_bytes);
    stat(out, "limit_maxbytes", info.limit_maxbytes);
    stat(out, "accepting_conns", 1);
    stat(out, "threads", info.threads);
    stat(out, "hash_bytes", s.hash_bytes);
    stat(out, "slab_reassign_rescues", s.slab_reassign_rescues);
    stat(out, "slab_reassign_evictions_nomem", s.slab_reassign_evictions_nomem);
    stat(out, "slabs_moved", s.slab_reassigns);
    stat(out, "bytes", s.bytes);
    stat(out, "curr_items", s.curr_items);
    stat(out, "total_items", s.total_items);
    stat(out, "expired_unfetched", s.expired_unfetched);
    stat(out, "evicted_unfetched", s.evicted_unfetched);
    stat(out, "evictions", s.evictions);
    stat(out, "reclaimed", s.reclaimed);
    out += "END\r\n";
}

void format_settings(const server_info& info, std::string& out) {
    stat(out, "maxbytes", info.limit_maxbytes);
    stat(out, "maxconns", info.max_connections);
    stat(out, "tcpport", info.port);
    stat(out, "udpport", 0);
    stat(out, "evictions", "on");
    stat(out, "growth_factor", fmt::format("{:.2f}", info.growth_factor));
    stat(out, "chunk_size", info.chunk_size);
    stat(out, "num_threads", info.threads);
    stat(out, "cas_enabled", "yes");
    stat(out, "item_size_max", info.item_size_max);
    stat(out, "slab_reassign", "yes");
    stat(out, "hash_algorithm", "shoal");
    stat(out, "flush_enabled", "yes");
    out += "END\r\n";
}

std::vector<slab_class_info> merge_classes(const std::vector<std::vector<slab_class_info>>& per_shard) {
    std::map<unsigned, slab_class_info> by_id;
    for (const auto& shard : per_shard) {
        for (const auto& c : shard) {
            auto [it, fresh] = by_id.try_emplace(c.id, c);
            if (fresh) {
                continue;
            }
            slab_class_info& m = it->second;
            m.pages += c.pages;
            m.used_chunks += c.used_chunks;
            m.free_chunks += c.free_chunks;
            m.items += c.items;
            m.evicted += c.evicted;
            m.mem_requested += c.mem_requested;
            if (c.oldest_time && (!m.oldest_time || c.oldest_time < m.oldest_time)) {
                m.oldest_time = c.oldest_time;
            }
        }
    }
    std::vector<slab_class_info> out;
    for (auto& [id, c] : by_id) {
        out.push_back(c);
    }
    return out;
}

void format_slabs(const std::vector<slab_class_info>& classes, uint64_t total_malloced, std::string& out) {
    for (const auto& c : classes) {
        std::string p = fmt::format("{}:", c.id);
        stat(out, p + "chunk_size", c.chunk_size);
        stat(out, p + "chunks_per_page", c.chunks_per_page);
        stat(out, p + "total_pages", c.pages);
        stat(out, p + "total_chunks", c.pages * c.chunks_per_page);
        stat(out, p + "used_chunks", c.used_chunks);
        stat(out, p + "free_chunks", c.free_chunks);
        stat(out, p + "mem_requested", c.mem_requested);
    }
    stat(out, "active_slabs", classes.size());
    stat(out, "total_malloced", total_malloced);
    out += "END\r\n";
}

void format_items(const std::vector<slab_class_info>& classes, uint32_t now, std::string& out) {
    for (const auto& c : classes) {
        if (c.items == 0) {
            continue;
        }
        std::string p = fmt::format("items:{}:", c.id);
        stat(out, p + "number", c.items);
        stat(out, p + "age", c.oldest_time && now > c.oldest_time ? now - c.oldest_time : 0);
        stat(out, p + "mem_requested", c.mem_requested);
        stat(out, p + "evicted", c.evicted);
    }
    out += "END\r\n";
}

} // namespace shoal::kv
