#pragma once
/// @file
/// Shared pieces of the `mpistage._mpistage` extension (pybind11): the communicator hand-off from
/// mpi4py, the batch hand-off to numpy (zero copy), and the binders of each part of the API.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "mpistage/mpistage.hpp"

namespace mpistage::python {

namespace py = pybind11;

/// The MPI communicator whose Fortran handle is `fortran_handle` (`mpi4py.MPI.Comm.py2f()`),
/// borrowed for one constructor (sources, loaders): no MPI call here; the object makes its own
/// duplicate (its one `MPI_Comm_dup`, the launcher check first). `timeout` is the watchdog
/// deadline of that duplication and of the teardown of the objects made on it (a source's file
/// closes), 0 = none. @throws MpiError when MPI is not initialised (import mpi4py.MPI first),
/// ConfigError for MPI_COMM_NULL or a bad timeout.
CommRef comm_ref(std::int64_t fortran_handle,
                 std::chrono::seconds timeout = kDefaultCollectiveTimeout);

/// A Communicator over that communicator, for a function that runs collectives itself
/// (collective over it: one `MPI_Comm_dup`, see `Communicator`). @throws as `comm_ref`.
Communicator communicator(std::int64_t fortran_handle,
                          std::chrono::seconds timeout = kDefaultCollectiveTimeout);

/// The numpy dtype of an mpistage element type.
py::dtype numpy_dtype(DType dtype);

/// The batch as a tuple `(epoch, step, num_valid, index, valid, fields, offsets, device)`:
/// `index` int64 [B], `valid` bool [B], `fields` one entry per field (fixed: [B, *sample_shape]
/// of the field's dtype; ragged: the concatenated values, 1-D), `offsets` per field None or
/// int64 [B+1] byte offsets, `device` the CUDA ordinal of the fields or -1. On a host batch
/// (`device` -1) every entry is a numpy array viewing the batch's own memory (no copy), all
/// sharing one capsule that owns the batch, so its ring slot returns to the loader when the
/// last array is gone. On a CUDA batch each field is a `DeviceField` (a DLPack producer:
/// `__dlpack__(stream=)` gives a "dltensor" capsule over device memory after ordering `stream`
/// on the copy and fencing the block on it; `__dlpack_device__()`; `torch.from_dlpack` takes it
/// without a copy) holding the batch's device block; `index`, `valid` and `offsets` are numpy
/// arrays over the batch's host copies.
py::tuple batch_to_python(HostBatch&& batch);

/// A field list as Python data: one dict per field (name, dtype, shape, sample_bytes, ragged).
py::list fields_to_python(const std::vector<FieldInfo>& fields);

/// `message` with C++ option fields named as the Python arguments that set them
/// (`EpochOptions::max_steps` -> `max_steps=`, `plan.batch_size` -> `batch_size=`).
std::string python_names(const std::string& message);

void bind_errors(py::module_& m);
/// `DeviceField`, the DLPack producer of a CUDA batch's fields (see `batch_to_python`).
void bind_batch(py::module_& m);
void bind_options(py::module_& m);
void bind_loader(py::module_& m);
void bind_streams(py::module_& m);
void bind_checks(py::module_& m);

}  // namespace mpistage::python
