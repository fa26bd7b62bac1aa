#pragma once
// `mpistage --version`: the version and the build features (internal to the CLI).

#include <string>

namespace mpistage::cli {

/// Local, callable before MPI_Init: "mpistage 0.1.0" and one line per build feature: the MPI
/// library (MPI_Get_library_version), HDF5 (built against and loaded), libtorch and CUDA
/// (versions built against, or "no").
std::string version_text();

/// Local: the git commit of the source tree the CLI was built from (40 hex digits, read when
/// the build was configured: from git, or from a release tarball's cmake/git-commit.txt), or
/// "unknown".
std::string git_commit();

}  // namespace mpistage::cli
