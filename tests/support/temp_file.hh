#pragma once

// Temporary files and directories of a test, removed when the test is done with them.

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace shoal::testing {

/// The directory for temporary files: $TMPDIR, else /tmp.
inline std::string temp_dir_root() {
    const char* dir = std::getenv("TMPDIR");
    return dir && *dir ? dir : "/tmp";
}

/// A file in the temporary directory holding `content`; removed by the destructor.
class temp_file {
public:
    explicit temp_file(const std::string& content, const std::string& prefix = "shoal-test") {
        _path = temp_dir_root() + "/" + prefix + "-XXXXXX";
        int fd = ::mkstemp(_path.data());
        EXPECT_GE(fd, 0) << "mkstemp " << _path;
        EXPECT_EQ(::write(fd, content.data(), content.size()), ssize_t(content.size()));
        ::close(fd);
    }
    temp_file(const temp_file&) = delete;
    temp_file& operator=(const temp_file&) = delete;
    ~temp_file() { ::unlink(_path.c_str()); }

    /// Where the file is.
    const std::string& path() const { return _path; }

private:
    std::string _path;
};

/// A fresh directory in the temporary directory; removed with everything in it by the destructor.
class temp_dir {
public:
    explicit temp_dir(const std::string& prefix = "shoal-test") {
        std::string tmpl = temp_dir_root() + "/" + prefix + "-XXXXXX";
        EXPECT_NE(::mkdtemp(tmpl.data()), nullptr) << "mkdtemp " << tmpl;
        _path = tmpl;
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(_path, ec);
        EXPECT_FALSE(ec) << "removing " << _path << ": " << ec.message();
    }

    /// Where the directory is.
    const std::string& path() const { return _path; }
    /// The path of `name` inside the directory (the file is not created).
    std::string file(const std::string& name) const { return _path + "/" + name; }

private:
    std::string _path;
};

} // namespace shoal::testing
