#pragma once
// Checks made on a path before any open, so that no rank blocks in open() on a FIFO and every
// failure names its real cause (internal).

#include <cstdint>
#include <string>

namespace mpistage::detail {

/// What `stat` says of an input path that may be opened.
struct InputFileInfo {
    std::uint64_t size_bytes = 0;  ///< st_size (for a block device: its size from lseek)
    std::uint64_t device = 0;      ///< st_dev
    std::uint64_t inode = 0;       ///< st_ino
    std::int64_t mtime_ns = 0;     ///< modification time, ns since the epoch
};

/// Local (not collective). Accepts only regular files and block devices that this process may
/// read. Never opens a FIFO, socket or character device (open() would block or consume data).
/// @throws IoError "does not exist" (ENOENT), "permission denied" (EACCES), or the errno text;
///         ConfigError when the path is a directory, FIFO, socket or character device.
///         Every message names `context` and the path.
InputFileInfo probe_input_file(const std::string& path, const std::string& context);

}  // namespace mpistage::detail
