#include "util/posix_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "mpistage/error.hpp"
#include "util/descriptor_limit.hpp"
#include "util/input_file.hpp"

namespace mpistage::detail {

PosixFile::PosixFile(const std::string& path) : path_(path) {
    // Never open a FIFO, socket or character device: open() would block or consume data.
    probe_input_file(path, "cannot open");
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
        const int err = errno;
        throw IoError("cannot open '" + path + "': " + std::strerror(err) +
                      (err == EMFILE ? descriptor_note() : std::string()));
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
        const int e = errno;
        ::close(fd_);
        fd_ = -1;
        throw IoError("cannot stat '" + path + "': " + std::strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        ::close(fd_);
        fd_ = -1;
        throw IoError("'" + path + "' is a directory, not a file");
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
}

PosixFile::PosixFile(PosixFile&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), size_(o.size_), path_(std::move(o.path_)) {}

PosixFile& PosixFile::operator=(PosixFile&& o) noexcept {
    if (this != &o) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = std::exchange(o.fd_, -1);
        size_ = o.size_;
        path_ = std::move(o.path_);
    }
    return *this;
}

PosixFile::~PosixFile() {
    if (fd_ >= 0) ::close(fd_);
}

std::uint64_t PosixFile::current_size_bytes() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
        throw IoError("fstat of '" + path_ + "' failed: " + std::strerror(errno));
    }
    return static_cast<std::uint64_t>(st.st_size);
}

void PosixFile::read_exact(std::byte* dst, std::uint64_t n, std::uint64_t offset,
                           const std::string& context) const {
    if (offset > size_ || n > size_ - offset) {
        throw IoError(context + ": truncated: read of " + std::to_string(n) + " bytes at offset " +
                      std::to_string(offset) + " passes the end of '" + path_ + "' (" +
                      std::to_string(size_) + " bytes)");
    }
    constexpr std::uint64_t kPiece = std::uint64_t{1} << 30;
    std::uint64_t done = 0;
    while (done < n) {
        const std::size_t want = static_cast<std::size_t>(std::min(kPiece, n - done));
        const ssize_t got = ::pread(fd_, dst + done, want, static_cast<off_t>(offset + done));
        if (got < 0) {
            if (errno == EINTR) continue;
            throw IoError(context + ": pread of '" + path_ + "' at offset " +
                          std::to_string(offset + done) + " failed: " + std::strerror(errno));
        }
        if (got == 0) {
            throw IoError(context + ": '" + path_ + "' ended at offset " +
                          std::to_string(offset + done) + " (expected " + std::to_string(n - done) +
                          " more bytes)");
        }
        done += static_cast<std::uint64_t>(got);
    }
}

}  // namespace mpistage::detail
