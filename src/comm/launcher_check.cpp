#include "comm/launcher_check.hpp"

#include <mpi.h>

#include <cerrno>
#include <cstdlib>

#include "mpistage/error.hpp"

namespace mpistage::detail {
namespace {

struct Source {
    const char* variable;
    const char* launcher;
};

// The MPI launchers' own counts: set by the launcher that the MPI library joins.
constexpr Source kMpiLaunchers[] = {
    {"OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"},
    {"PMI_SIZE", "a PMI launcher (MPICH/Intel MPI mpiexec, srun --mpi=pmi2)"},
    {"PMIX_SIZE", "a PMIx launcher"},
    {"MV2_COMM_WORLD_SIZE", "MVAPICH's mpirun_rsh"},
};
constexpr Source kTorch[] = {
    {"WORLD_SIZE", "torchrun (torch.distributed)"},
    {"LOCAL_WORLD_SIZE", "torchrun (torch.distributed)"},
};
constexpr Source kSlurm[] = {
    {"SLURM_STEP_NUM_TASKS", "srun"},
    {"SLURM_NTASKS", "Slurm (sbatch/salloc/srun)"},
    {"SLURM_NPROCS", "Slurm (sbatch/salloc/srun)"},
};

// The value of `name` as a whole number, or nullopt when unset or not a number.
std::optional<long long> count_of(const EnvLookup& env, const char* name) {
    const std::optional<std::string> text = env(name);
    if (!text || text->empty()) return std::nullopt;
    errno = 0;
    char* end = nullptr;
    const long long value = std::strtoll(text->c_str(), &end, 10);
    if (errno != 0 || end == text->c_str() || *end != '\0' || value < 0) return std::nullopt;
    return value;
}

}  // namespace

EnvLookup process_environment() {
    return [](const std::string& name) -> std::optional<std::string> {
        const char* value = std::getenv(name.c_str());
        if (value == nullptr) return std::nullopt;
        return std::string(value);
    };
}

std::optional<LauncherClaim> launcher_mismatch(int world_size, const EnvLookup& env) {
    if (world_size != 1) return std::nullopt;
    bool mpi_launcher_set = false;
    for (const Source& source : kMpiLaunchers) {
        const std::optional<long long> tasks = count_of(env, source.variable);
        if (!tasks) continue;
        mpi_launcher_set = true;
        if (*tasks > 1) return LauncherClaim{source.variable, *tasks, source.launcher};
    }
    // Under an MPI launcher's count of 1, WORLD_SIZE may be a job script's leftover export (for
    // torch's env:// set-up): only torchrun's own marks make it torchrun's.
    const bool torchrun = env("TORCHELASTIC_RUN_ID").has_value() || env("GROUP_RANK").has_value();
    if (!mpi_launcher_set || torchrun) {
        for (const Source& source : kTorch) {
            const std::optional<long long> tasks = count_of(env, source.variable);
            if (tasks && *tasks > 1) return LauncherClaim{source.variable, *tasks, source.launcher};
        }
    }
    if (mpi_launcher_set) return std::nullopt;  // mpirun -n 1 inside a larger allocation
    for (const Source& source : kSlurm) {
        const std::optional<long long> tasks = count_of(env, source.variable);
        if (!tasks) continue;
        if (*tasks > 1) return LauncherClaim{source.variable, *tasks, source.launcher};
        // srun's step count, when set, is the count of this step: the allocation's
        // SLURM_NTASKS that follows may be larger on purpose (srun -n 1 inside sbatch -n 4).
        if (std::string(source.variable) == "SLURM_STEP_NUM_TASKS") return std::nullopt;
    }
    return std::nullopt;
}

std::string launcher_mismatch_message(const LauncherClaim& claim) {
    const std::string n = std::to_string(claim.tasks);
    return "comm: this process is an MPI world of 1 rank, but " + claim.variable + "=" + n +
           " (set by " + claim.launcher + ") says the job has " + n +
           " tasks: the processes were not started by the MPI launcher, so each would read the "
           "whole dataset. Start the job with the MPI launcher: `mpirun -n " + n +
           " ...` (or `srun --mpi=pmix -n " + n +
           " ...` under Slurm), not torchrun or a plain `python`/binary; for PyTorch, "
           "mpistage.distributed.init_process_group() then sets up torch.distributed from MPI. If one "
           "process is intended, set " + kAllowSingletonVariable + "=1.";
}

void check_launcher() {
    const EnvLookup env = process_environment();
    if (const auto opt_out = env(kAllowSingletonVariable); opt_out && *opt_out == "1") return;
    int world_size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (const std::optional<LauncherClaim> claim = launcher_mismatch(world_size, env)) {
        throw ConfigError(launcher_mismatch_message(*claim));
    }
}

}  // namespace mpistage::detail
