#include "core/file.hh"

#include "core/reactor.hh"

#include <memory>
#include <system_error>
#include <utility>

#include <sys/stat.h>
#include <unistd.h>

namespace shoal {

namespace {
std::system_error io_error(int negative_errno, const char* op, const std::string& path) {
    return std::system_error(-negative_errno, std::system_category(), std::string(op) + " " + path);
}
} // namespace

file::file(file&& o) noexcept
    : _fd(std::exchange(o._fd, -1))
    , _path(std::move(o._path)) {}

file& file::operator=(file&& o) noexcept {
    if (this != &o) {
        if (_fd >= 0) {
            ::close(_fd);
        }
        _fd = std::exchange(o._fd, -1);
        _path = std::move(o._path);
    }
    return *this;
}

file::~file() {
    if (_fd >= 0) {
        ::close(_fd);
    }
}

future<file> file::open(std::string path, int flags, mode_t mode) {
    // The path must outlive the request: keep it in a heap string owned by the continuation.
    auto owned = std::make_unique<std::string>(std::move(path));
    const char* p = owned->c_str();
    auto f = local_reactor().submit_io([p, flags, mode](io_uring_sqe* sqe) {
        io_uring_prep_openat(sqe, AT_FDCWD, p, flags | O_CLOEXEC, mode);
    });
    return std::move(f).then([owned = std::move(owned)](int rc) -> future<file> {
        if (rc < 0) {
            return make_exception_future<file>(io_error(rc, "open", *owned));
        }
        return make_ready_future<file>(file(rc, std::move(*owned)));
    });
}

future<size_t> file::read(uint64_t pos, void* buf, size_t len) {
    int fd = _fd;
    return local_reactor()
        .submit_io([=](io_uring_sqe* sqe) { io_uring_prep_read(sqe, fd, buf, unsigned(len), pos); })
        .then([this](int rc) -> future<size_t> {
            if (rc < 0) {
                return make_exception_future<size_t>(io_error(rc, "read", _path));
            }
            return make_ready_future<size_t>(size_t(rc));
        });
}

future<size_t> file::write(uint64_t pos, const void* buf, size_t len) {
    int fd = _fd;
    return local_reactor()
        .submit_io([=](io_uring_sqe* sqe) { io_uring_prep_write(sqe, fd, buf, unsigned(len), pos); })
        .then([this](int rc) -> future<size_t> {
            if (rc < 0) {
                return make_exception_future<size_t>(io_error(rc, "write", _path));
            }
            return make_ready_future<size_t>(size_t(rc));
        });
}

future<> file::fsync() {
    int fd = _fd;
    return local_reactor()
        .submit_io([=](io_uring_sqe* sqe) { io_uring_prep_fsync(sqe, fd, 0); })
        .then([this](int rc) -> future<> {
            if (rc < 0) {
                return make_exception_future<>(io_error(rc, "fsync", _path));
            }
            return make_ready_future<>();
        });
}

future<uint64_t> file::size() {
    auto st = std::make_unique<struct statx>();
    auto* stp = st.get();
    int fd = _fd;
    return local_reactor()
        .submit_io(
            [=](io_uring_sqe* sqe) { io_uring_prep_statx(sqe, fd, "", AT_EMPTY_PATH, STATX_SIZE, stp); })
        .then([this, st = std::move(st)](int rc) -> future<uint64_t> {
            if (rc < 0) {
                return make_exception_future<uint64_t>(io_error(rc, "statx", _path));
            }
            return make_ready_future<uint64_t>(st->stx_size);
        });
}

future<> file::close() {
    int fd = std::exchange(_fd, -1);
    if (fd < 0) {
        return make_ready_future<>();
    }
    return local_reactor()
        .submit_io([=](io_uring_sqe* sqe) { io_uring_prep_close(sqe, fd); })
        .then([path = _path](int rc) -> future<> {
            if (rc < 0) {
                return make_exception_future<>(io_error(rc, "close", path));
            }
            return make_ready_future<>();
        });
}

} // namespace shoal
