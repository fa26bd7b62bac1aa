#pragma once
/// @file
/// Everything a trainer uses, in one include: the communicator, errors, the sources (HDF5, IDX
/// and raw records, TFRecord, SQLite streams) and `open_source`, IDX conversion, the planner,
/// the `Loader` with its state for resume, and the stream loader. No CUDA or torch headers;
/// include "mpistage/torch.hpp" (target mpistage::torch) for tensors and device staging.

#include "mpistage/comm.hpp"
#include "mpistage/config.hpp"
#include "mpistage/convert.hpp"
#include "mpistage/device.hpp"
#include "mpistage/dtype.hpp"
#include "mpistage/error.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/open.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/raw_source.hpp"
#include "mpistage/source.hpp"
#include "mpistage/sqlite_source.hpp"
#include "mpistage/state.hpp"
#include "mpistage/stop.hpp"
#include "mpistage/stream.hpp"
#include "mpistage/stream_source.hpp"
#include "mpistage/tf_example.hpp"
#include "mpistage/tfrecord_source.hpp"
