#include "apps/kv/memcached_args.hh"

#include <map>

namespace shoal::kv_app {

std::vector<std::string> translate_memcached_args(int argc, char** argv) {
    static const std::map<char, std::string> long_of = {
        {'p', "--port"},          {'l', "--listen"},   {'m', "--memory"},  {'c', "--max-connections"},
        {'I', "--max-item-size"}, {'U', "--udp-port"}, {'t', "--threads"},
    };
    std::vector<std::string> out;
    for (int i = 0; i < argc; ++i) {
        std::string a = argv[i];
        if (i > 0 && a.size() >= 2 && a[0] == '-' && a[1] != '-') {
            if (a == "-v" || a == "-vv" || a == "-vvv") {
                continue;
            }
            auto it = long_of.find(a[1]);
            if (it != long_of.end()) {
                out.push_back(it->second);
                if (a.size() > 2) {
                    out.push_back(a.substr(2));
                }
                continue;
            }
        }
        out.push_back(a);
    }
    return out;
}

} // namespace shoal::kv_app
