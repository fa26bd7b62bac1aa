// Atomic whole-file writes: temporary file in the same folder, fsync, rename.
#include "cli/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "mpistage/error.hpp"

namespace mpistage::cli {

int make_temporary_beside(const std::string& path, std::string& tmp) {
    tmp = path + ".tmp.XXXXXX";
    return ::mkstemp(tmp.data());
}

std::string folder_of(const std::string& path) {
    const auto slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

void check_destination(const std::string& path, const std::string& label) {
    const auto refuse = [&](const std::string& why) {
        throw ConfigError("stage: cannot write " + label + " '" + path + "': " + why);
    };
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) refuse("it is a directory");
    const std::string folder = folder_of(path);
    if (::access(folder.c_str(), W_OK | X_OK) != 0) {
        refuse("cannot write into its folder '" + folder + "': " + std::strerror(errno));
    }
    // access() says yes to root in /proc and /sys, where no file can be created: create (and
    // remove) the temporary file the writer will create, exactly as it will.
    std::string tmp;
    const int fd = make_temporary_beside(path, tmp);
    if (fd < 0) {
        refuse("cannot create a file in its folder '" + folder + "' (tried '" + tmp +
               "'): " + std::strerror(errno));
    }
    ::close(fd);
    ::unlink(tmp.c_str());
}

void write_file_atomically(const std::string& path, const std::string& text,
                           const std::string& label) {
    const auto fail_with = [&](const std::string& what, int err) {
        throw IoError("stage: cannot write " + label + " '" + path + "': " + what + ": " +
                      std::strerror(err));
    };
    std::string tmp;
    const int fd = make_temporary_beside(path, tmp);
    if (fd < 0) fail_with("creating a temporary file in its folder", errno);
    const auto fail = [&](const char* what) {
        const int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        fail_with(what, err);
    };
    if (::fchmod(fd, 0644) != 0) fail("fchmod");
    for (std::size_t done = 0; done < text.size();) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail("write");
        done += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0) fail("fsync");
    if (::close(fd) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        fail_with("close", err);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        fail_with("rename", err);
    }
}

}  // namespace mpistage::cli
