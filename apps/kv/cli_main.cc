// shoal-kv-cli: one memcached command from the shell.
//
//   shoal-kv-cli [--host H] [--port P] get KEY...        prints each value found (exit 1: a miss)
//   shoal-kv-cli [--host H] [--port P] set KEY VALUE [--flags N] [--exptime S]
//   shoal-kv-cli [--host H] [--port P] del KEY
//   shoal-kv-cli [--host H] [--port P] stats [settings|items|slabs]
//
// Plain blocking sockets: a tool for people, not a benchmark.

#include "apps/kv/reply_reader.hh"

#include <algorithm>
#include <arpa/inet.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <netdb.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace {

int usage() {
    std::fprintf(stderr, "usage: shoal-kv-cli [--host H] [--port P] get KEY... | set KEY VALUE [--flags N] "
                         "[--exptime S] | del KEY | stats [ARG]\n");
    return 2;
}

int connect_to(const std::string& host, const std::string& port) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
        std::fprintf(stderr, "shoal-kv-cli: %s:%s: %s\n", host.c_str(), port.c_str(), ::gai_strerror(rc));
        return -1;
    }
    int fd = ::socket(res->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || ::connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
        std::fprintf(stderr, "shoal-kv-cli: connect %s:%s: %s\n", host.c_str(), port.c_str(),
                     std::strerror(errno));
        ::freeaddrinfo(res);
        return -1;
    }
    ::freeaddrinfo(res);
    return fd;
}

/// Sends `req` and returns the whole reply (multi-line for get and stats).
bool exchange(int fd, const std::string& req, bool multi_line, bool until_end, std::string& reply) {
    for (size_t off = 0; off < req.size();) {
        ssize_t n = ::send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
        if (n <= 0) {
            return false;
        }
        off += size_t(n);
    }
    char buf[65536];
    for (;;) {
        if (until_end) {
            if (reply.starts_with("ERROR") || reply.starts_with("CLIENT_ERROR") ||
                (reply.size() >= 5 && reply.compare(reply.size() - 5, 5, "END\r\n") == 0)) {
                return true;
            }
        } else if (shoal::kv_app::next_reply(reply, multi_line).bytes) {
            return true;
        }
        ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) {
            return false;
        }
        reply.append(buf, size_t(n));
    }
}

} // namespace

int main(int argc, char** argv) {
    std::string host = "127.0.0.1", port = "11211", flags = "0", exptime = "0";
    std::vector<std::string> words;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&](std::string& into) {
            if (i + 1 >= argc) {
                std::exit(usage());
            }
            into = argv[++i];
        };
        if (a == "--host" || a == "-h") {
            value(host);
        } else if (a == "--port" || a == "-p") {
            value(port);
        } else if (a == "--flags") {
            value(flags);
        } else if (a == "--exptime") {
            value(exptime);
        } else if (a == "--help") {
            usage();
            return 0;
        } else {
            words.push_back(a);
        }
    }
    if (words.empty()) {
        return usage();
    }
    const std::string& cmd = words[0];
    std::string req;
    bool multi = false, until_end = false;
    if (cmd == "get" && words.size() >= 2) {
        req = "get";
        for (size_t i = 1; i < words.size(); ++i) {
            req += " " + words[i];
        }
        req += "\r\n";
        multi = true;
    } else if (cmd == "set" && words.size() == 3) {
        req = "set " + words[1] + " " + flags + " " + exptime + " " + std::to_string(words[2].size()) +
              "\r\n" + words[2] + "\r\n";
    } else if ((cmd == "del" || cmd == "delete") && words.size() == 2) {
        req = "delete " + words[1] + "\r\n";
    } else if (cmd == "stats" && words.size() <= 2) {
        req = words.size() == 2 ? "stats " + words[1] + "\r\n" : "stats\r\n";
        until_end = true;
    } else {
        return usage();
    }
    int fd = connect_to(host, port);
    if (fd < 0) {
        return 1;
    }
    std::string reply;
    bool ok = exchange(fd, req, multi, until_end, reply);
    ::close(fd);
    if (!ok) {
        std::fprintf(stderr, "shoal-kv-cli: the connection ended before the reply\n");
        return 1;
    }
    if (cmd == "get") {
        // Print each value on its own line; a miss of any key exits with 1.
        size_t pos = 0;
        unsigned found = 0;
        while (reply.compare(pos, 6, "VALUE ") == 0) {
            size_t nl = reply.find("\r\n", pos);
            // VALUE <key> <flags> <bytes> [<cas>]: the fourth word is the length.
            size_t at = pos;
            for (int word = 0; word < 3 && at < nl; ++word) {
                at = std::min(reply.find(' ', at), nl) + 1;
            }
            size_t len = at < nl ? std::strtoul(reply.c_str() + at, nullptr, 10) : 0;
            if (nl == std::string::npos || at >= nl || nl + 2 + len + 2 > reply.size()) {
                std::fprintf(stderr, "shoal-kv-cli: malformed reply: %.*s\n",
                             int(std::min<size_t>(nl - pos, 200)), reply.c_str() + pos);
                return 1;
            }
            std::fwrite(reply.data() + nl + 2, 1, len, stdout);
            std::fputc('\n', stdout);
            pos = nl + 2 + len + 2;
            ++found;
        }
        if (reply.compare(pos, 3, "END") != 0) {
            std::fputs(reply.c_str() + pos, stderr);
            return 1;
        }
        return found == words.size() - 1 ? 0 : 1;
    }
    // Lines end in "\n" on the terminal, not in the protocol's "\r\n".
    for (size_t pos = 0, nl; pos < reply.size(); pos = nl + 2) {
        nl = reply.find("\r\n", pos);
        if (nl == std::string::npos) {
            std::fwrite(reply.data() + pos, 1, reply.size() - pos, stdout);
            break;
        }
        std::fwrite(reply.data() + pos, 1, nl - pos, stdout);
        std::fputc('\n', stdout);
    }
    bool good = reply.starts_with("STORED") || reply.starts_with("DELETED") || reply.starts_with("STAT") ||
                reply.starts_with("END");
    return good ? 0 : 1;
}
