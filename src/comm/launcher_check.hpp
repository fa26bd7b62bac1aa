#pragma once
/// @file
/// The launcher check (internal): a process whose MPI world has one rank while its environment
/// says the job has more tasks was started without the MPI launcher (torchrun, a PMI-less
/// `srun`, `python train.py` inside an `sbatch -n 4` script, a binary built against another MPI
/// than the `mpirun` that started it). Each such process is an MPI world of one and would read
/// the whole dataset: the duplication mpistage exists to end. `Communicator`'s constructor calls
/// `check_launcher()` so every collective object (sources, `Loader`) refuses to start.

#include <functional>
#include <optional>
#include <string>

namespace mpistage::detail {

/// One environment variable that says how many tasks the job (or job step) has.
struct LauncherClaim {
    std::string variable;  ///< e.g. "WORLD_SIZE"
    long long tasks = 0;   ///< its value
    std::string launcher;  ///< who sets it, e.g. "torchrun (torch.distributed)"
};

/// Reads one environment variable; `std::nullopt` when unset. Injected by tests.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

/// The process environment (`getenv`).
EnvLookup process_environment();

/// Opt-out variable: `MPISTAGE_ALLOW_SINGLETON=1` accepts a world of one whatever the
/// environment says (a single-process evaluation started inside a larger job, say).
inline constexpr const char* kAllowSingletonVariable = "MPISTAGE_ALLOW_SINGLETON";

/// Pure, local: the first variable that contradicts an MPI world of `world_size` ranks, or
/// `std::nullopt`. Only a world of one is checked (a world of W > 1 was started by an MPI
/// launcher, which knows its count). Variables, in order:
///  - the MPI launchers' own counts (`OMPI_COMM_WORLD_SIZE` from Open MPI's `mpirun`,
///    `PMI_SIZE` from Hydra/PMI-1/PMI-2 launchers and `srun --mpi=pmi2`, `PMIX_SIZE` where the
///    PMIx server exports it, `MV2_COMM_WORLD_SIZE` from MVAPICH): above 1 in a world of one means
///    this binary's MPI did not join the launcher's job (two MPI libraries mixed up);
///  - torchrun's `WORLD_SIZE` and `LOCAL_WORLD_SIZE`; under an MPI launcher's count of 1 only
///    when torchrun's own `TORCHELASTIC_RUN_ID` or `GROUP_RANK` is set too (`mpirun -n 1
///    torchrun ...`), since job scripts export `WORLD_SIZE` for torch themselves;
///  - Slurm's `SLURM_STEP_NUM_TASKS` (when set, the only one read: an `srun -n 1` step), else
///    `SLURM_NTASKS`, `SLURM_NPROCS`, but only when no MPI
///    launcher count is set: `mpirun -n 1` inside an `sbatch -n 4` allocation sets
///    `OMPI_COMM_WORLD_SIZE=1`, and that intended run of one is not refused.
/// Values that are not whole numbers are ignored (they are not this check's business).
std::optional<LauncherClaim> launcher_mismatch(int world_size, const EnvLookup& env);

/// Local: the refusal's text for `claim` in a world of one: both counts, the variable, who sets
/// it, how to launch (`mpirun -n N`, `srun --mpi=pmix -n N`) and the opt-out.
std::string launcher_mismatch_message(const LauncherClaim& claim);

/// Local, called by `Communicator`'s constructor: reads `MPI_COMM_WORLD`'s size and the
/// process environment. @throws ConfigError with `launcher_mismatch_message` when
/// `launcher_mismatch` finds a claim and `MPISTAGE_ALLOW_SINGLETON` is not `1`.
void check_launcher();

}  // namespace mpistage::detail
