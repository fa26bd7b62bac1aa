#pragma once
// The resume point of a LoaderState checked against its own options and world size: a pure
// function, so the serial tests can mutate states without MPI (docs/resume.md, "Validation").

#include "mpistage/plan.hpp"
#include "mpistage/state.hpp"

namespace mpistage::detail {

/// Pure: what a state alone decides (`LoaderState::from_json` and `Loader::restore` call it):
/// `world_size` in [1, kMaxStateWorldSize], N ≥ 1, valid plan options, `samples_consumed` ≤ N,
/// the run start not after the state, and no steps without samples or samples without steps
/// (also for the run start). `origin` names the state in messages.
/// @throws ConfigError naming the fields and their values.
void check_state_numbers(const LoaderState& state, const std::string& origin);

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
/// and that at least one step of the epoch remains at world_size. Runs
/// `check_state_numbers` first.
/// @throws ConfigError naming the fields, their values and the value they imply.
void check_resume_point(const LoaderState& state, const SampleBytesFn& sample_bytes = {},
                        const SampleTokensFn& sample_tokens = {});

}  // namespace mpistage::detail
