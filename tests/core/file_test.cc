// File I/O through the shard's io_uring ring: open, write, fsync, read, size, close, errors.
#include "core/file.hh"
#include "core/future_util.hh"
#include "support/run.hh"
#include "support/temp_file.hh"

#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <string>
#include <system_error>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

using namespace shoal;
using shoal::testing::run_in_shard;
using shoal::testing::temp_dir;

namespace {

/// The errno of a failed future's system_error (consumes it).
template <typename T>
int error_code_of(future<T>& f) {
    EXPECT_TRUE(f.failed());
    try {
        std::rethrow_exception(f.get_exception());
    } catch (const std::system_error& e) {
        return e.code().value();
    } catch (...) {
    }
    return -1;
}

} // namespace

TEST(file, write_fsync_read_back) {
    temp_dir dir;
    auto path = dir.file("data");
    EXPECT_EQ(run_in_shard([path]() -> future<> {
                  auto f = co_await file::open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
                  EXPECT_TRUE(f.is_open());
                  EXPECT_EQ(f.path(), path);
                  std::string text = "0123456789abcdef";
                  EXPECT_EQ(co_await f.write(0, text.data(), text.size()), text.size());
                  EXPECT_EQ(co_await f.write(100, "tail", 4), 4u);
                  co_await f.fsync();
                  EXPECT_EQ(co_await f.size(), 104u);

                  char buf[200] = {};
                  EXPECT_EQ(co_await f.read(0, buf, 16), 16u);
                  EXPECT_EQ(std::string(buf, 16), text);
                  EXPECT_EQ(co_await f.read(10, buf, 6), 6u);
                  EXPECT_EQ(std::string(buf, 6), "abcdef");
                  EXPECT_EQ(co_await f.read(16, buf, 84), 84u); // the hole reads as zeros
                  EXPECT_EQ(std::string(buf, 84), std::string(84, '\0'));
                  EXPECT_EQ(co_await f.read(100, buf, sizeof(buf)), 4u); // short read at the end
                  EXPECT_EQ(co_await f.read(104, buf, sizeof(buf)), 0u); // end of file
                  co_await f.close();
                  EXPECT_FALSE(f.is_open());
                  co_await f.close(); // closing twice is harmless
              }),
              0);
    // The data really is on disk.
    int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    char buf[16];
    EXPECT_EQ(::read(fd, buf, 16), 16);
    EXPECT_EQ(std::string(buf, 16), "0123456789abcdef");
    ::close(fd);
}

TEST(file, many_requests_in_flight) {
    temp_dir dir;
    auto path = dir.file("parallel");
    EXPECT_EQ(run_in_shard([path]() -> future<> {
                  auto f = co_await file::open(path, O_RDWR | O_CREAT | O_TRUNC);
                  constexpr int n = 64;
                  std::vector<std::string> blocks;
                  for (int i = 0; i < n; ++i) {
                      blocks.push_back(std::string(512, char('A' + i % 26)));
                  }
                  std::vector<future<size_t>> writes;
                  for (int i = 0; i < n; ++i) {
                      writes.push_back(f.write(uint64_t(i) * 512, blocks[i].data(), 512));
                  }
                  for (size_t w : co_await when_all_succeed(std::move(writes))) {
                      EXPECT_EQ(w, 512u);
                  }
                  std::vector<std::string> back(n, std::string(512, ' '));
                  std::vector<future<size_t>> reads;
                  for (int i = 0; i < n; ++i) {
                      reads.push_back(f.read(uint64_t(i) * 512, back[i].data(), 512));
                  }
                  co_await when_all_succeed(std::move(reads));
                  EXPECT_EQ(back, blocks);
                  co_await f.close();
              }),
              0);
}

TEST(file, open_errors_name_the_path) {
    temp_dir dir;
    auto missing = dir.file("missing");
    EXPECT_EQ(run_in_shard([missing]() -> future<> {
                  auto f = file::open(missing, O_RDONLY);
                  auto r = co_await std::move(f).then_wrapped([](future<file> f) {
                      if (!f.failed()) {
                          return std::string("opened");
                      }
                      try {
                          std::rethrow_exception(f.get_exception());
                      } catch (const std::system_error& e) {
                          EXPECT_EQ(e.code().value(), ENOENT);
                          return std::string(e.what());
                      }
                      return std::string("not a system_error");
                  });
                  EXPECT_NE(r.find("open"), std::string::npos) << r;
                  EXPECT_NE(r.find(missing), std::string::npos) << r;
                  // O_EXCL on an existing file.
                  auto g = co_await file::open(missing, O_WRONLY | O_CREAT);
                  co_await g.close();
                  auto excl = co_await file::open(missing, O_WRONLY | O_CREAT | O_EXCL)
                                  .then_wrapped([](future<file> f) { return error_code_of(f); });
                  EXPECT_EQ(excl, EEXIST);
              }),
              0);
}

TEST(file, io_errors_are_exceptions) {
    temp_dir dir;
    auto path = dir.file("ro");
    EXPECT_EQ(run_in_shard([path]() -> future<> {
                  {
                      auto w = co_await file::open(path, O_WRONLY | O_CREAT);
                      co_await w.close();
                  }
                  auto f = co_await file::open(path, O_RDONLY);
                  auto wr = co_await f.write(0, "x", 1).then_wrapped(
                      [](future<size_t> r) { return error_code_of(r); });
                  EXPECT_EQ(wr, EBADF); // opened read-only
                  co_await f.close();
                  char c;
                  auto rd = co_await f.read(0, &c, 1).then_wrapped(
                      [](future<size_t> r) { return error_code_of(r); });
                  EXPECT_EQ(rd, EBADF); // closed
                  auto fs = co_await f.fsync().then_wrapped([](future<> r) { return error_code_of(r); });
                  EXPECT_EQ(fs, EBADF);
              }),
              0);
}

TEST(file, destructor_closes_the_descriptor) {
    temp_dir dir;
    auto path = dir.file("dtor");
    int fd = -1;
    EXPECT_EQ(run_in_shard([path, &fd]() -> future<> {
                  auto f = co_await file::open(path, O_RDWR | O_CREAT);
                  fd = f.fd();
                  EXPECT_GE(fcntl(fd, F_GETFD), 0);
                  EXPECT_TRUE(fcntl(fd, F_GETFD) & FD_CLOEXEC);
                  file moved(std::move(f));
                  EXPECT_FALSE(f.is_open());
                  EXPECT_EQ(moved.fd(), fd);
              }),
              0);
    errno = 0;
    EXPECT_EQ(fcntl(fd, F_GETFD), -1);
    EXPECT_EQ(errno, EBADF);
}
