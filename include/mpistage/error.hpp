#pragma once
/// @file
/// The exception hierarchy of mpistage. Every error the library raises is an `mpistage::Error`;
/// the subclass says which layer failed. Messages name what failed, where (file, byte offset,
/// dataset), on which rank, and the underlying library's own text.

#include <stdexcept>
#include <string>

namespace mpistage {

/// Which subclass an error is; travels between ranks so every rank rethrows the same type.
enum class ErrorKind : int { generic = 1, config = 2, io = 3, format = 4, mpi = 5, hdf5 = 6, cuda = 7 };

/// Base of all mpistage exceptions. Thread safety: immutable after construction.
class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what, ErrorKind kind = ErrorKind::generic)
        : std::runtime_error(what), kind_(kind) {}
    /// The subclass this error belongs to.
    ErrorKind kind() const noexcept { return kind_; }

private:
    ErrorKind kind_;
};

/// Invalid options, options that differ between ranks, or an input that cannot be sharded.
class ConfigError : public Error {
public:
    explicit ConfigError(const std::string& what) : Error(what, ErrorKind::config) {}
};
/// An operating-system or MPI-IO read/open failure (missing file, short read, truncation).
class IoError : public Error {
public:
    explicit IoError(const std::string& what) : Error(what, ErrorKind::io) {}
};
/// Bytes that do not follow the declared format (bad CRC, bad header, wrong type).
class FormatError : public Error {
public:
    explicit FormatError(const std::string& what) : Error(what, ErrorKind::format) {}
};
/// An MPI call returned an error code; the message carries `MPI_Error_string`.
class MpiError : public Error {
public:
    explicit MpiError(const std::string& what) : Error(what, ErrorKind::mpi) {}
};
/// An HDF5 call failed; the message carries HDF5's own error stack.
class Hdf5Error : public Error {
public:
    explicit Hdf5Error(const std::string& what) : Error(what, ErrorKind::hdf5) {}
};
/// A CUDA runtime call failed; the message carries `cudaGetErrorString`.
class CudaError : public Error {
public:
    explicit CudaError(const std::string& what) : Error(what, ErrorKind::cuda) {}
};

/// Throws the subclass of `Error` that `kind` names, with message `what`.
[[noreturn]] void throw_error(ErrorKind kind, const std::string& what);

}  // namespace mpistage
