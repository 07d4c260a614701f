#include "apps/common/bench_target.hh"

#include "apps/common/options.hh"

#include <charconv>
#include <stdexcept>

namespace shoal::apps {

namespace {

[[noreturn]] void bad_item(const std::string& item, const std::string& why) {
    throw std::invalid_argument("--targets wants name=host:port[@pid], got '" + item + "': " + why);
}

} // namespace

std::vector<bench_target> parse_targets(const std::string& list) {
    std::vector<bench_target> out;
    for (const std::string& item : split(list, ',')) {
        size_t eq = item.find('=');
        if (eq == std::string::npos) {
            bad_item(item, "no '='");
        }
        if (eq == 0) {
            bad_item(item, "no name");
        }
        std::string where = item.substr(eq + 1);
        int pid = 0;
        if (size_t at = where.find('@'); at != std::string::npos) {
            const char* first = where.data() + at + 1;
            const char* last = where.data() + where.size();
            auto [end, ec] = std::from_chars(first, last, pid);
            if (ec != std::errc() || end != last || pid <= 0) {
                bad_item(item, "the pid is not a positive number");
            }
            where.resize(at);
        }
        net::socket_address address;
        try {
            address = net::socket_address::parse(where);
        } catch (const std::exception& e) {
            bad_item(item, e.what());
        }
        out.push_back({item.substr(0, eq), address, pid});
    }
    return out;
}

} // namespace shoal::apps
