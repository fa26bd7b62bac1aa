#pragma once
/// @file
/// The core of mpistage: communicator, sources, planner and loader. No CUDA or torch headers;
/// include "mpistage/torch.hpp" (target mpistage::torch) for tensors.

#include "mpistage/comm.hpp"
#include "mpistage/config.hpp"
#include "mpistage/device.hpp"
#include "mpistage/dtype.hpp"
#include "mpistage/error.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/raw_source.hpp"
#include "mpistage/source.hpp"
#include "mpistage/state.hpp"
#include "mpistage/tf_example.hpp"
#include "mpistage/tfrecord_source.hpp"
