#pragma once
/// @file
/// Opening a dataset from its paths: format detection and the collective, agreed open of the
/// matching source (HDF5, IDX through `RawSource`, TFRecord).

#include <memory>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/source.hpp"
#include "mpistage/tf_example.hpp"
#include "mpistage/tfrecord_source.hpp"

namespace mpistage {

/// The kind of source `open_source` opens.
enum class SourceFormat {
    automatic,  ///< detected from the first path (`detect_source_format`)
    hdf5,       ///< one HDF5 file (`Hdf5Source`)
    idx,        ///< IDX files, one field each, aligned on the record (`RawSource`)
    tfrecord,   ///< TFRecord files, plain or whole-file gzip (`TfRecordSource`)
};

/// "auto", "hdf5", "idx" or "tfrecord".
std::string to_string(SourceFormat format);

/// Not collective, local: the format of the file at `path`: HDF5 when its first 8 bytes are
/// the HDF5 signature; else TFRecord when the name contains .tfrecord, .tfrecords or .tfr, or
/// ends in .gz without naming IDX; else IDX when the name contains "idx" or "ubyte"; else HDF5
/// (whose open then names what is wrong). Reads at most 8 bytes; never opens a FIFO, socket or
/// character device. Never returns `automatic`. Thread-safe.
/// @throws IoError (missing or unreadable file), ConfigError (not a regular file or block
///         device), naming the path.
SourceFormat detect_source_format(const std::string& path);

/// Options of `open_source`. Every rank must pass the same values (the sources check theirs).
struct OpenOptions {
    /// The format of the paths; `automatic` detects it from the first path.
    SourceFormat format = SourceFormat::automatic;
    /// HDF5: the datasets that form the fields (empty: every usable dataset). IDX: the field
    /// name of each path, in order (a path without one is named "field<i>"). TFRecord: unused.
    std::vector<std::string> fields;
    /// TFRecord: DALI index files, one per data file (empty: the index-free split).
    std::vector<std::string> index_paths;
    /// TFRecord: what a corrupt record does.
    OnCorrupt on_corrupt = OnCorrupt::error;
    /// TFRecord: the features decoded into fields (`TfRecordOptions::features`).
    std::vector<FeatureSpec> features;
};

/// Collective over `comm`: opens `paths` as one source. Steps, each agreed across ranks before
/// the next, so ranks never enter different collectives: every path (and index path) is probed
/// (missing, unreadable, a FIFO or directory: the same error on every rank); the format is
/// `options.format` or detected from `paths[0]`, and every rank must have found the same (the
/// same path can name different files on different nodes: a ConfigError naming the format
/// each rank saw); the format's options are checked (IDX headers, TFRecord features); then the
/// source's own collective open runs (`Hdf5Source`, `RawSource` over the IDX headers,
/// `TfRecordSource`).
///
/// Ownership: the caller owns the returned source, which must be destroyed, or closed, on every
/// rank at the same point, while MPI is initialised. `comm` (a `Communicator` or a plain
/// `MPI_Comm`, see `CommRef`) is borrowed for the call only, and the call makes one
/// `MPI_Comm_dup` at most: given a plain `MPI_Comm`, the duplicate the format agreement runs on
/// is handed to the source (an HDF5 source keeps it); given a `Communicator`, only an HDF5
/// source duplicates it, to keep. Thread safety: one call at a time per communicator.
/// @throws ConfigError (no paths, an HDF5 format with more than one path, ranks that disagree,
///         bad options), IoError, FormatError, Hdf5Error, MpiError: identical on every rank.
std::unique_ptr<Source> open_source(CommRef comm, const std::vector<std::string>& paths,
                                    const OpenOptions& options = {});

}  // namespace mpistage
