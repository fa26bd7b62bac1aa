#include "util/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "mpistage/error.hpp"

namespace mpistage::detail {

namespace {

const char* kind_of(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISCHR(mode)) return "a character device";
    return "not a regular file";
}

[[noreturn]] void throw_errno(int err, const std::string& context, const std::string& path) {
    const std::string where = context + ": '" + path + "' ";
    if (err == ENOENT) throw IoError(where + "does not exist");
    if (err == EACCES) throw IoError(where + "cannot be read: permission denied");
    if (err == ENOTDIR) throw IoError(where + "does not exist (a component is not a directory)");
    throw IoError(where + "cannot be accessed: " + std::strerror(err));
}

}  // namespace

InputFileInfo probe_input_file(const std::string& path, const std::string& context) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw_errno(errno, context, path);
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
        throw ConfigError(context + ": '" + path + "' is " + kind_of(st.st_mode) +
                          "; only regular files and block devices can be staged");
    }
    if (::access(path.c_str(), R_OK) != 0) throw_errno(errno, context, path);
    InputFileInfo info;
    info.size_bytes = static_cast<std::uint64_t>(st.st_size);
    info.device = static_cast<std::uint64_t>(st.st_dev);
    info.inode = static_cast<std::uint64_t>(st.st_ino);
    info.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (S_ISBLK(st.st_mode)) {
        // O_NONBLOCK: a block device never blocks in open, but be safe against odd drivers.
        const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) throw_errno(errno, context, path);
        const off_t end = ::lseek(fd, 0, SEEK_END);
        ::close(fd);
        if (end < 0) throw_errno(errno, context, path);
        info.size_bytes = static_cast<std::uint64_t>(end);
    }
    return info;
}

}  // namespace mpistage::detail
