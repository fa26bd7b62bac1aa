// Whole-file outputs: a regular file is replaced atomically (temporary file in the same folder,
// fsync, rename); a device, a FIFO or an inherited descriptor is written in place.
#include "cli/atomic_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>

#include "mpistage/error.hpp"

namespace mpistage::cli {

namespace {

// What a path is to the writer: how to write it, and the file the write goes to (the file a
// symbolic link names, for a replace; the descriptor number, for a descriptor path).
struct Destination {
    OutputKind kind = OutputKind::replace;
    std::string target;
    int fd = -1;
};

// The descriptor a path names (/dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N), or -1.
int descriptor_of(const std::string& path) {
    if (path == "/dev/stdout") return 1;
    if (path == "/dev/stderr") return 2;
    for (const char* prefix : {"/dev/fd/", "/proc/self/fd/"}) {
        const std::string p = prefix;
        if (path.size() <= p.size() || path.compare(0, p.size(), p) != 0) continue;
        const std::string digits = path.substr(p.size());
        if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) {
            return -1;
        }
        return std::atoi(digits.c_str());
    }
    return -1;
}

[[noreturn]] void refuse(const std::string& label, const std::string& path,
                         const std::string& why) {
    throw ConfigError("stage: cannot write " + label + " '" + path + "': " + why);
}

Destination destination_of(const std::string& path, const std::string& label) {
    Destination d;
    d.target = path;
    if (const int fd = descriptor_of(path); fd >= 0) {
        const int flags = ::fcntl(fd, F_GETFL);
        if (flags < 0) refuse(label, path, "descriptor " + std::to_string(fd) + " is not open");
        const int mode = flags & O_ACCMODE;
        if (mode != O_WRONLY && mode != O_RDWR) {
            refuse(label, path,
                   "descriptor " + std::to_string(fd) + " is not open for writing");
        }
        d.kind = OutputKind::descriptor;
        d.fd = fd;
        return d;
    }
    struct stat link {};
    if (::lstat(path.c_str(), &link) != 0) return d;  // nothing there yet: a new file
    struct stat st = link;
    if (S_ISLNK(link.st_mode)) {
        if (::stat(path.c_str(), &st) != 0) {
            // A link to nothing: the file it names is created in place.
            d.kind = OutputKind::in_place;
            return d;
        }
    }
    if (S_ISDIR(st.st_mode)) refuse(label, path, "it is a directory");
    if (S_ISREG(st.st_mode)) {
        if (S_ISLNK(link.st_mode)) {
            // Replace the file the link names, so the link stays a link.
            std::unique_ptr<char, decltype(&std::free)> real(::realpath(path.c_str(), nullptr),
                                                             &std::free);
            if (!real) refuse(label, path, std::string("realpath: ") + std::strerror(errno));
            d.target = real.get();
        }
        return d;
    }
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
        d.kind = OutputKind::in_place;
        return d;
    }
    refuse(label, path,
           std::string("it is a ") + (S_ISBLK(st.st_mode) ? "block device" : "socket") +
               "; give a regular file, a new path, a character device such as /dev/null, or "
               "a FIFO");
}

void write_all(int fd, const std::string& text, const std::function<void(const char*)>& fail) {
    for (std::size_t done = 0; done < text.size();) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail("write");
        done += static_cast<std::size_t>(n);
    }
}

}  // namespace

int make_temporary_beside(const std::string& path, std::string& tmp) {
    tmp = path + ".tmp.XXXXXX";
    return ::mkstemp(tmp.data());
}

std::string folder_of(const std::string& path) {
    const auto slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

int remove_stale_temporaries(const std::string& prefix, const std::string& keep) {
    const std::string folder = folder_of(prefix);
    const auto slash = prefix.find_last_of('/');
    const std::string stem = slash == std::string::npos ? prefix : prefix.substr(slash + 1);
    struct CloseDir {
        void operator()(DIR* d) const noexcept { ::closedir(d); }
    };
    std::unique_ptr<DIR, CloseDir> dir(::opendir(folder.c_str()));
    if (!dir) return 0;
    static const char* const kAlphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    int removed = 0;
    while (const dirent* e = ::readdir(dir.get())) {
        const std::string name = e->d_name;
        if (name.size() != stem.size() + 6 || name.compare(0, stem.size(), stem) != 0 ||
            name == keep || name.find_first_not_of(kAlphabet, stem.size()) != std::string::npos) {
            continue;
        }
        const std::string file = folder + "/" + name;
        struct stat st {};
        if (::lstat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
            ::unlink(file.c_str()) == 0) {
            ++removed;
        }
    }
    return removed;
}

OutputKind output_kind(const std::string& path, const std::string& label) {
    return destination_of(path, label).kind;
}

void check_destination(const std::string& path, const std::string& label) {
    const Destination d = destination_of(path, label);
    if (d.kind == OutputKind::descriptor) return;
    if (d.kind == OutputKind::in_place) {
        struct stat st {};
        // An existing device or FIFO: writable as it is; a link to nothing: its folder.
        const bool exists = ::stat(path.c_str(), &st) == 0;
        const std::string probe = exists ? path : folder_of(d.target);
        if (::access(probe.c_str(), W_OK) != 0) {
            refuse(label, path,
                   std::string(exists ? "it is not writable" : "cannot write into the folder '" +
                                                                   probe + "' its link names") +
                       ": " + std::strerror(errno));
        }
        return;
    }
    const std::string folder = folder_of(d.target);
    struct stat folder_st {};
    if (::stat(folder.c_str(), &folder_st) == 0 && !S_ISDIR(folder_st.st_mode)) {
        refuse(label, path, "cannot write into its folder '" + folder + "': Not a directory");
    }
    if (::access(folder.c_str(), W_OK | X_OK) != 0) {
        refuse(label, path, "cannot write into its folder '" + folder + "': " + std::strerror(errno));
    }
    // access() says yes to root in /proc and /sys, where no file can be created: create (and
    // remove) the temporary file the writer will create, exactly as it will.
    std::string tmp;
    const int fd = make_temporary_beside(d.target, tmp);
    if (fd < 0) {
        refuse(label, path,
               "cannot create a file in its folder '" + folder + "' (tried '" + tmp +
                   "'): " + std::strerror(errno));
    }
    ::close(fd);
    ::unlink(tmp.c_str());
    remove_stale_temporaries(d.target + ".tmp.");
}

void write_output_file(const std::string& path, const std::string& text,
                       const std::string& label) {
    const auto fail_with = [&](const std::string& what, int err) {
        throw IoError("stage: cannot write " + label + " '" + path + "': " + what + ": " +
                      std::strerror(err));
    };
    const Destination d = destination_of(path, label);
    if (d.kind == OutputKind::descriptor) {
        write_all(d.fd, text, [&](const char* what) { fail_with(what, errno); });
        return;
    }
    if (d.kind == OutputKind::in_place) {
        // No O_TRUNC: a device ignores it and a FIFO has nothing to truncate; no rename, so a
        // device node stays what it is.
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) fail_with("open", errno);
        write_all(fd, text, [&](const char* what) {
            const int err = errno;
            ::close(fd);
            fail_with(what, err);
        });
        if (::close(fd) != 0) fail_with("close", errno);
        return;
    }
    std::string tmp;
    const int fd = make_temporary_beside(d.target, tmp);
    if (fd < 0) fail_with("creating a temporary file in its folder", errno);
    const auto fail = [&](const char* what) {
        const int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        fail_with(what, err);
    };
    if (::fchmod(fd, 0644) != 0) fail("fchmod");
    write_all(fd, text, fail);
    if (::fsync(fd) != 0) fail("fsync");
    if (::close(fd) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        fail_with("close", err);
    }
    if (::rename(tmp.c_str(), d.target.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        fail_with("rename", err);
    }
}

}  // namespace mpistage::cli
