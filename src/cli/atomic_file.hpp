#pragma once
// Whole-file outputs of the CLI (--json, --save-state, --ids-out): a regular file is replaced
// atomically, so a reader never sees it half done; a device, a FIFO or an inherited descriptor
// (/dev/stdout) is written in place, never replaced (internal to the CLI).

#include <string>

namespace mpistage::cli {

/// How an output path is written (decided from what the path is when the write starts).
enum class OutputKind {
    /// A regular file, or nothing yet: a temporary file beside it, fsync, rename over it.
    replace,
    /// A character device (/dev/null) or a FIFO: opened for writing and written in place
    /// (no truncation, no rename).
    in_place,
    /// /dev/stdout, /dev/stderr, /dev/fd/N or /proc/self/fd/N: written to descriptor N of this
    /// process as it stands (a file the shell redirected into is appended to, not truncated).
    descriptor,
};

/// Local: how `path` would be written now. A symbolic link is followed: a link to a regular
/// file replaces the file it names (the link stays), a link to a device or FIFO writes in
/// place. @throws ConfigError naming `label` and `path` for a directory, a block device, a
/// socket, an unwritable device or FIFO, or a descriptor that is not open for writing.
OutputKind output_kind(const std::string& path, const std::string& label);

/// Local: writes `text` to `path` as `output_kind` says: a regular file (or a new path) through
/// a temporary file in its folder (`path` + ".tmp.XXXXXX", mode 0644), fsync and rename; a
/// character device or FIFO in place (a FIFO blocks until a reader opens it); a descriptor
/// path to that descriptor. `label` names the file in errors (e.g. "--json file").
/// @throws ConfigError as `output_kind`; IoError naming the label, the path and the failing
///         call.
void write_output_file(const std::string& path, const std::string& text,
                       const std::string& label);

/// Local: checks that `path` can be written later by `write_output_file`. For a regular file or
/// a new path: its folder exists, is writable, and a temporary file can be created in it (one
/// is created and removed, as the writer will; `path` itself is not touched); temporaries
/// (`path` + ".tmp." + 6 characters) that a killed run left behind are removed. For a device,
/// a FIFO or a descriptor: that it can be written (nothing is opened: a FIFO would block).
/// @throws ConfigError naming the label, the path (and folder) and the system's reason.
void check_destination(const std::string& path, const std::string& label);

/// Local: creates the temporary file `write_output_file` writes before renaming it over
/// `path` (`path` + ".tmp.XXXXXX", mode 0600, via mkstemp); sets `tmp` to its name. Returns
/// the open descriptor, or -1 with errno set.
int make_temporary_beside(const std::string& path, std::string& tmp);

/// Local: removes the files `prefix` + 6 characters of mkstemp's alphabet in the folder of
/// `prefix` (the temporaries of a killed run), except `keep` (a file name without folder).
/// Returns how many were removed; errors are ignored (a file another process removed first).
int remove_stale_temporaries(const std::string& prefix, const std::string& keep = "");

/// The folder part of `path` ("." when it has none).
std::string folder_of(const std::string& path);

}  // namespace mpistage::cli
