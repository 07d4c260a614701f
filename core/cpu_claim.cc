#include "core/cpu_claim.hh"

#include <cstdlib>
#include <utility>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace shoal {

std::string cpu_lock_dir() {
    const char* dir = std::getenv("SHOAL_CPU_LOCK_DIR");
    return dir && *dir ? dir : "/tmp";
}

cpu_claims cpu_claims::claim(const std::vector<unsigned>& allowed, unsigned n) {
    cpu_claims c;
    if (allowed.empty()) {
        return c;
    }
    std::string dir = cpu_lock_dir();
    for (unsigned cpu : allowed) {
        if (c._cpus.size() == n) {
            break;
        }
        std::string path = dir + "/shoal-cpu-" + std::to_string(cpu) + ".lock";
        int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0) {
            continue; // cannot tell: leave it to others
        }
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            ::close(fd); // held by another shoal process
            continue;
        }
        c._fds.push_back(fd);
        c._cpus.push_back(cpu);
    }
    for (size_t i = 0; c._cpus.size() < n; ++i) {
        c._shared = true;
        c._cpus.push_back(allowed[i % allowed.size()]);
    }
    return c;
}

cpu_claims::cpu_claims(cpu_claims&& o) noexcept
    : _cpus(std::move(o._cpus))
    , _fds(std::move(o._fds))
    , _shared(o._shared) {
    o._fds.clear();
}

cpu_claims& cpu_claims::operator=(cpu_claims&& o) noexcept {
    if (this != &o) {
        release();
        _cpus = std::move(o._cpus);
        _fds = std::move(o._fds);
        _shared = o._shared;
        o._fds.clear();
    }
    return *this;
}

cpu_claims::~cpu_claims() {
    release();
}

void cpu_claims::release() noexcept {
    for (int fd : _fds) {
        ::close(fd);
    }
    _fds.clear();
}

} // namespace shoal
