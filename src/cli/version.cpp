// `mpistage --version`: the version and the build features.
#include "cli/version.hpp"

#include <hdf5.h>
#include <mpi.h>

#include "mpistage/config.hpp"

#ifndef MPISTAGE_GIT_COMMIT
#define MPISTAGE_GIT_COMMIT "unknown"
#endif

namespace mpistage::cli {

namespace {

// The first line of the MPI library's own version text (e.g. "Open MPI v4.1.4, ...").
std::string mpi_library() {
    char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
    int length = 0;
    if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "unknown";
    std::string out(text, static_cast<std::size_t>(length));
    const auto end = out.find_first_of("\r\n");
    if (end != std::string::npos) out.resize(end);
    while (!out.empty() && (out.back() == ' ' || out.back() == '\0')) out.pop_back();
    return out;
}

std::string hdf5_loaded() {
    unsigned major = 0, minor = 0, release = 0;
    if (H5get_libversion(&major, &minor, &release) < 0) return "unknown";
    return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

std::string feature(bool built, const char* version) {
    if (!built) return "no";
    return std::string("yes, ") + (*version != '\0' ? version : "version unknown");
}

}  // namespace

std::string git_commit() {
    return MPISTAGE_GIT_COMMIT;
}

std::string version_text() {
    int major = 0, minor = 0;
    MPI_Get_version(&major, &minor);
    std::string out = "mpistage " MPISTAGE_VERSION "\n";
    out += "  commit: " + git_commit() + "\n";
    out += "  MPI:   " + mpi_library() + " (MPI standard " + std::to_string(major) + "." +
           std::to_string(minor) + ")\n";
    out += "  HDF5:  " + hdf5_loaded() + ", parallel (built against " MPISTAGE_HDF5_VERSION ")\n";
    out += "  torch: " + feature(MPISTAGE_HAVE_TORCH != 0, MPISTAGE_TORCH_VERSION) + "\n";
    out += "  CUDA:  " + feature(MPISTAGE_HAVE_CUDA != 0, MPISTAGE_CUDA_VERSION);
    return out;
}

}  // namespace mpistage::cli
