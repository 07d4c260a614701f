#pragma once

#include <string>
#include <vector>

namespace shoal {

/// CPUs a process holds against the other shoal processes of the machine, so that two programs
/// started with default flags (a server and its client) do not both pin to CPU 0. Each CPU is
/// claimed with an exclusive `flock` on `<dir>/shoal-cpu-<N>.lock` (dir: `$SHOAL_CPU_LOCK_DIR`,
/// else /tmp); the kernel drops the locks when the process exits, however it exits.
class cpu_claims {
public:
    /// Claims `n` CPUs among `allowed`, in order, skipping those another process holds. When
    /// fewer than `n` are free, the remaining shards get CPUs from `allowed` round-robin without
    /// a claim, and `shared()` is true.
    static cpu_claims claim(const std::vector<unsigned>& allowed, unsigned n);

    cpu_claims() = default;
    cpu_claims(cpu_claims&& o) noexcept;
    cpu_claims& operator=(cpu_claims&& o) noexcept;
    cpu_claims(const cpu_claims&) = delete;
    cpu_claims& operator=(const cpu_claims&) = delete;
    /// Releases the claims.
    ~cpu_claims();

    /// The CPU of each shard.
    const std::vector<unsigned>& cpus() const noexcept { return _cpus; }
    /// True when some shard runs on a CPU it could not claim (another process may use it too).
    bool shared() const noexcept { return _shared; }

private:
    void release() noexcept;
    std::vector<unsigned> _cpus;
    std::vector<int> _fds;
    bool _shared = false;
};

/// The directory of the CPU lock files: `$SHOAL_CPU_LOCK_DIR`, else /tmp.
std::string cpu_lock_dir();

} // namespace shoal
