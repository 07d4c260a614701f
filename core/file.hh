#pragma once

#include "core/future.hh"

#include <cstddef>
#include <cstdint>
#include <string>

#include <fcntl.h>
#include <sys/types.h>

namespace shoal {

/// A file opened through the shard's io_uring ring: every operation is one SQE and resolves
/// when its CQE arrives. Buffers passed to `read` and `write` must stay valid until the future
/// resolves. Errors are std::system_error naming the operation and the path.
class file {
public:
    file() = default;
    file(file&& o) noexcept;
    file& operator=(file&& o) noexcept;
    file(const file&) = delete;
    file& operator=(const file&) = delete;
    /// Closes synchronously if `close()` was not awaited (a fallback, not the normal path).
    ~file();

    /// Opens `path` with open(2) `flags` (O_CLOEXEC is added) and `mode` for O_CREAT.
    static future<file> open(std::string path, int flags, mode_t mode = 0644);

    /// Reads up to `len` bytes at `pos`; resolves with the count (0 at end of file).
    future<size_t> read(uint64_t pos, void* buf, size_t len);
    /// Writes up to `len` bytes at `pos`; resolves with the count written.
    future<size_t> write(uint64_t pos, const void* buf, size_t len);
    /// Flushes data and metadata to storage.
    future<> fsync();
    /// Current size in bytes.
    future<uint64_t> size();
    /// Closes the descriptor.
    future<> close();

    bool is_open() const noexcept { return _fd >= 0; }
    int fd() const noexcept { return _fd; }
    const std::string& path() const noexcept { return _path; }

private:
    file(int fd, std::string path) noexcept
        : _fd(fd)
        , _path(std::move(path)) {}
    int _fd = -1;
    std::string _path;
};

} // namespace shoal
