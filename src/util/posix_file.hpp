#pragma once
// A read-only POSIX file descriptor with checked, 64-bit positional reads (internal).

#include <cstddef>
#include <cstdint>
#include <string>

namespace mpistage::detail {

/// Move-only owner of a read-only file descriptor. `read_exact` is thread-safe (pread).
class PosixFile {
public:
    PosixFile() = default;
    /// Checks the path with `probe_input_file` first (only regular files and block devices).
    /// @throws IoError naming the path and errno text when the file cannot be opened;
    ///         ConfigError for a directory, FIFO, socket or character device.
    explicit PosixFile(const std::string& path);
    PosixFile(PosixFile&& o) noexcept;
    PosixFile& operator=(PosixFile&& o) noexcept;
    PosixFile(const PosixFile&) = delete;
    PosixFile& operator=(const PosixFile&) = delete;
    ~PosixFile();

    /// Size in bytes at open time.
    std::uint64_t size_bytes() const noexcept { return size_; }
    /// Size in bytes now (fstat). @throws IoError naming the path when fstat fails.
    std::uint64_t current_size_bytes() const;
    const std::string& path() const noexcept { return path_; }
    /// The descriptor (owned; valid while this object lives), for mapping the file.
    int fd() const noexcept { return fd_; }
    /// Reads exactly `n` bytes at `offset`, in pieces of at most 1 GiB.
    /// @throws IoError naming `context`, the path and the offset on a short read or error
    ///         (a range past end of file is a truncation error, decided from the file size).
    void read_exact(std::byte* dst, std::uint64_t n, std::uint64_t offset,
                    const std::string& context) const;

private:
    int fd_ = -1;
    std::uint64_t size_ = 0;
    std::string path_;
};

}  // namespace mpistage::detail
