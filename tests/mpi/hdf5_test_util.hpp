#pragma once
// Shared helpers of the HDF5 / loader / raw / torch MPI tests (namespace h5t), in parts under
// tests/common/ so that each stays small:
//   h5t_mpi.hpp     rank, size, reductions, broadcasts, TempDir (collective over MPI_COMM_WORLD)
//   h5t_h5dump.hpp  h5dump on rank 0 (broadcast), shell commands, plain file reads, parse_as
//   h5t_checks.hpp  VectorSink, catch_error / expect_same_error / H5T_EXPECT_SAME_ERROR
//   h5t_files.hpp   HDF5 / gzip test files, the generated dataset, shared_files()
//
// Everything here that makes an MPI call is collective over MPI_COMM_WORLD and must be called by
// every rank at the same point. Known answers come from independent readers: `h5dump` (run on
// rank 0, its output broadcast), plain ifstream/zlib reads, or SOURCES.md, never from mpistage.

#include <functional>  // part of what this header always provided

#include "h5t_checks.hpp"
#include "h5t_files.hpp"
#include "h5t_h5dump.hpp"
#include "h5t_mpi.hpp"
