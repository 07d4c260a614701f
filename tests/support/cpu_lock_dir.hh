#pragma once

// A private directory for the CPU claims of the engines a test starts (core/cpu_claim.hh), so
// that other shoal processes on the machine neither move nor are moved by them.

#include "support/temp_file.hh"

#include <cstdlib>

namespace shoal::testing {

/// A fresh lock directory, named in SHOAL_CPU_LOCK_DIR while the object lives.
class private_cpu_lock_dir {
public:
    private_cpu_lock_dir() { ::setenv("SHOAL_CPU_LOCK_DIR", _dir.path().c_str(), 1); }
    private_cpu_lock_dir(const private_cpu_lock_dir&) = delete;
    private_cpu_lock_dir& operator=(const private_cpu_lock_dir&) = delete;
    ~private_cpu_lock_dir() { ::unsetenv("SHOAL_CPU_LOCK_DIR"); }

    /// Where the locks are.
    const std::string& path() const { return _dir.path(); }

private:
    temp_dir _dir{"shoal-cpu-locks"};
};

} // namespace shoal::testing
