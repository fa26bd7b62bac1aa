#pragma once
// Whole-file writes that a reader never sees half done (internal to the CLI).

#include <string>

namespace mpistage::cli {

/// Local: writes `text` to a temporary file in the folder of `path` (mode 0644), fsyncs it and
/// renames it over `path`. `label` names the file in errors (e.g. "--json file").
/// @throws IoError naming the label, the path and the failing call.
void write_file_atomically(const std::string& path, const std::string& text,
                           const std::string& label);

/// Local: checks that `path` can be written later by `write_file_atomically`: not a directory,
/// its folder exists, is writable, and a temporary file can be created in it (one is created
/// and removed, as the writer will; `path` itself is not touched).
/// @throws ConfigError naming the label, the path, the folder and the system's reason.
void check_destination(const std::string& path, const std::string& label);

/// Local: creates the temporary file `write_file_atomically` writes before renaming it over
/// `path` (`path` + ".tmp.XXXXXX", mode 0600, via mkstemp); sets `tmp` to its name. Returns
/// the open descriptor, or -1 with errno set.
int make_temporary_beside(const std::string& path, std::string& tmp);

/// The folder part of `path` ("." when it has none).
std::string folder_of(const std::string& path);

}  // namespace mpistage::cli
