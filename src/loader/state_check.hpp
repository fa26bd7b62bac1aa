#pragma once
// The resume point of a LoaderState checked against its own options and world size: a pure
// function, so the serial tests can mutate states without MPI (docs/resume.md, "Validation").

#include "mpistage/plan.hpp"
#include "mpistage/state.hpp"

namespace mpistage::detail {

/// Pure: checks that `state`'s steps_consumed, samples_consumed and run start are a point a
/// run of `state.plan` at `state.world_size` over `state.num_samples` samples can have saved
/// inside `state.epoch` (not at its end: a state at the end of an epoch points at the next
/// one):
/// - fixed batches, `global`: samples_consumed = min(N, run_start_samples +
///   (steps_consumed − run_start_steps) · world_size · batch_size);
/// - fixed batches, `byte_range`: samples_consumed = the valid samples of the first
///   steps_consumed steps at world_size;
/// - a batch budget: samples_consumed = the samples of the batches those steps consumed
///   (from the run start with `global`, from the epoch's start with `byte_range`), by the
///   epoch's plan (`sample_bytes`/`sample_tokens` as for `plan_epoch`);
/// and that at least one step of the epoch remains at world_size. Assumes `from_json`'s
/// checks passed (world_size ≤ kMaxStateWorldSize, valid plan options, N ≥ 1).
/// @throws ConfigError naming the fields, their values and the value they imply.
void check_resume_point(const LoaderState& state, const SampleBytesFn& sample_bytes = {},
                        const SampleTokensFn& sample_tokens = {});

}  // namespace mpistage::detail
