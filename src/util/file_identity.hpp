#pragma once
// A short text that identifies a file's contents cheaply, for "do all ranks see the same
// file?" checks before a collective open (internal).

#include <string>

#include "util/posix_file.hpp"

namespace mpistage::detail {

/// Local: "size=S head=H tail=T" with H, T the FNV-1a hashes of the first and the last
/// 64 KiB of the file (for HDF5 the head holds the superblock and usually the root group).
/// Two ranks seeing different files at the same path almost always differ here; files that
/// differ only in the middle are caught later by the loader's sample fingerprint.
/// @throws IoError when the file cannot be read.
std::string file_identity(const PosixFile& file);

/// Local: throws when `file` is no longer the file whose `file_identity` was `opened` (size
/// now, then the hashes of its first and last 64 KiB): it was truncated, grown or rewritten
/// while being read, and bytes read from it may be zeros or another version's.
/// @throws IoError naming `context`, the path and both sizes.
void check_file_unchanged(const PosixFile& file, const std::string& opened,
                          const std::string& context);

}  // namespace mpistage::detail
