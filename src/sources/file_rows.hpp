#pragma once
// Where a source's rows lie in a file (internal): the typed capability behind
// `Source::file_rows()`, so the memory tier maps a file's pages without knowing the source's
// type (docs/architecture.md, "Memory tier").

#include <cstdint>
#include <string>

namespace mpistage::detail {

/// The rows of one fixed field, back to back in native byte order in an open file.
struct FileRows {
    int fd = -1;                   ///< read-only descriptor, owned by the source
    std::string path;              ///< for messages
    std::uint64_t offset = 0;      ///< byte offset of row 0
    std::uint64_t file_bytes = 0;  ///< the file's size when the source opened it
};

}  // namespace mpistage::detail
