#pragma once
// The per-process limit on open file descriptors (RLIMIT_NOFILE, `ulimit -n`): checked before
// a source opens its files, so that a low limit is an error naming the limit and the file
// instead of an MPI-IO or HDF5 failure without a cause ("MPI_ERR_OTHER: known error not in
// list", "not an HDF5 file") (internal).

#include <cstdint>
#include <string>

namespace mpistage::detail {

/// File descriptors this process holds and may hold.
struct DescriptorUse {
    /// Descriptors open now (entries of /proc/self/fd); 0 when that cannot be read.
    std::uint64_t open = 0;
    /// RLIMIT_NOFILE: the soft limit (what open() obeys) and the hard limit (how far a user may
    /// raise it); UINT64_MAX for RLIM_INFINITY.
    std::uint64_t soft_limit = 0;
    std::uint64_t hard_limit = 0;
};

/// Local: the current use (reads /proc/self/fd and getrlimit). Never throws.
DescriptorUse descriptor_use() noexcept;

/// Descriptors an open needs for a moment beyond those it keeps: Open MPI's MPI-IO opens a
/// shared-file-pointer helper file inside MPI_File_open (measured with `ulimit -n` at 2 and 3
/// ranks: a run fails exactly when the files' descriptors plus this one do not fit).
constexpr std::uint64_t kOpenDescriptorMargin = 1;

/// Local: throws unless `needed` more descriptors (plus kOpenDescriptorMargin) fit under the
/// soft limit. `what` names what is about to be opened ("'a.tfrecord' and 3 other files").
/// @throws IoError "<context>: too few file descriptors to open <what>: ..." naming the
///         descriptors open, the soft and hard limits (getrlimit RLIMIT_NOFILE) and `ulimit -n`.
void require_descriptors(std::uint64_t needed, const std::string& what, const std::string& context);

/// Local: "" or, when this process is within kOpenDescriptorMargin of its descriptor limit,
/// " (N of the M file descriptors allowed are open: RLIMIT_NOFILE, raise it with ulimit -n)",
/// to append to the message of a failed open whose library does not say why. Never throws.
std::string descriptor_note() noexcept;

}  // namespace mpistage::detail
