#pragma once
// Whole-file writes that a reader never sees half done (internal to the CLI).

#include <string>

namespace mpistage::cli {

/// Local: writes `text` to a temporary file in the folder of `path` (mode 0644), fsyncs it and
/// renames it over `path`. `label` names the file in errors (e.g. "--json file").
/// @throws IoError naming the label, the path and the failing call.
void write_file_atomically(const std::string& path, const std::string& text,
                           const std::string& label);

/// Local: checks that `path` can be written later (not a directory, its folder exists and is
/// writable) without creating it. @throws IoError naming the label and the path.
void check_destination(const std::string& path, const std::string& label);

/// The folder part of `path` ("." when it has none).
std::string folder_of(const std::string& path);

}  // namespace mpistage::cli
