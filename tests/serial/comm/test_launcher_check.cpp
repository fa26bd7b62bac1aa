// The launcher check (issue "For PyTorch users", launcher mismatch): a world of one whose
// environment says the job has more tasks is refused; the rules for each launcher's variables,
// pure (the environment injected). The processes themselves are tested in
// tests/e2e/launcher_check.sh (C++) and tests/python/test_launcher.py.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "comm/launcher_check.hpp"

namespace {

using mpistage::detail::EnvLookup;
using mpistage::detail::launcher_mismatch;
using mpistage::detail::launcher_mismatch_message;

EnvLookup env_of(std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
        const auto it = vars.find(name);
        if (it == vars.end()) return std::nullopt;
        return it->second;
    };
}

std::string variable_of(int world, std::map<std::string, std::string> vars) {
    const auto claim = launcher_mismatch(world, env_of(std::move(vars)));
    return claim ? claim->variable + "=" + std::to_string(claim->tasks) : "";
}

TEST(LauncherCheck, NothingSetIsAcceptedAtAnyWorldSize) {
    EXPECT_EQ(variable_of(1, {}), "");
    EXPECT_EQ(variable_of(4, {}), "");
}

TEST(LauncherCheck, TorchrunWorldSizeAboveOneInAWorldOfOneIsRefused) {
    EXPECT_EQ(variable_of(1, {{"WORLD_SIZE", "2"}, {"RANK", "1"}}), "WORLD_SIZE=2");
    EXPECT_EQ(variable_of(1, {{"LOCAL_WORLD_SIZE", "8"}}), "LOCAL_WORLD_SIZE=8");
    EXPECT_EQ(variable_of(1, {{"WORLD_SIZE", "1"}}), "");
    // mpirun -n 1 torchrun --nproc_per_node 2: the MPI launcher said 1, torchrun 2.
    EXPECT_EQ(variable_of(1, {{"OMPI_COMM_WORLD_SIZE", "1"}, {"WORLD_SIZE", "2"},
                              {"TORCHELASTIC_RUN_ID", "none"}}),
              "WORLD_SIZE=2");
    // mpirun -n 1 ./tool in a script that exported WORLD_SIZE for torch: intended.
    EXPECT_EQ(variable_of(1, {{"OMPI_COMM_WORLD_SIZE", "1"}, {"WORLD_SIZE", "4"}}), "");
}

TEST(LauncherCheck, AWorldOfMoreThanOneIsNeverRefused) {
    // mpirun -n 2 sets WORLD_SIZE in a trainer's bootstrap, or an allocation is larger.
    EXPECT_EQ(variable_of(2, {{"WORLD_SIZE", "4"}, {"SLURM_NTASKS", "8"}}), "");
    EXPECT_EQ(variable_of(3, {{"OMPI_COMM_WORLD_SIZE", "4"}}), "");
}

TEST(LauncherCheck, SlurmTasksWithoutAnMpiLauncherAreRefused) {
    EXPECT_EQ(variable_of(1, {{"SLURM_NTASKS", "2"}}), "SLURM_NTASKS=2");
    EXPECT_EQ(variable_of(1, {{"SLURM_NPROCS", "3"}}), "SLURM_NPROCS=3");
    EXPECT_EQ(variable_of(1, {{"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_NTASKS", "4"}}),
              "SLURM_STEP_NUM_TASKS=4");
    EXPECT_EQ(variable_of(1, {{"SLURM_NTASKS", "1"}}), "");
    // srun -n 1 inside sbatch -n 4: the step's own count is 1.
    EXPECT_EQ(variable_of(1, {{"SLURM_STEP_NUM_TASKS", "1"}, {"SLURM_NTASKS", "4"}}), "");
}

TEST(LauncherCheck, MpirunOfOneInsideALargerAllocationIsAccepted) {
    EXPECT_EQ(variable_of(1, {{"SLURM_NTASKS", "4"}, {"OMPI_COMM_WORLD_SIZE", "1"}}), "");
    EXPECT_EQ(variable_of(1, {{"SLURM_NTASKS", "4"}, {"PMI_SIZE", "1"}}), "");
}

TEST(LauncherCheck, AnMpiLaunchersCountAboveOneInAWorldOfOneIsRefused) {
    // A binary whose MPI did not join the launcher's job (two MPI libraries mixed up).
    EXPECT_EQ(variable_of(1, {{"OMPI_COMM_WORLD_SIZE", "2"}}), "OMPI_COMM_WORLD_SIZE=2");
    EXPECT_EQ(variable_of(1, {{"PMI_SIZE", "4"}, {"SLURM_NTASKS", "4"}}), "PMI_SIZE=4");
    EXPECT_EQ(variable_of(1, {{"PMIX_SIZE", "2"}}), "PMIX_SIZE=2");
    EXPECT_EQ(variable_of(1, {{"MV2_COMM_WORLD_SIZE", "2"}}), "MV2_COMM_WORLD_SIZE=2");
}

TEST(LauncherCheck, ValuesThatAreNotCountsAreIgnored) {
    EXPECT_EQ(variable_of(1, {{"WORLD_SIZE", ""}}), "");
    EXPECT_EQ(variable_of(1, {{"WORLD_SIZE", "two"}}), "");
    EXPECT_EQ(variable_of(1, {{"WORLD_SIZE", "2x"}}), "");
    EXPECT_EQ(variable_of(1, {{"SLURM_NTASKS", "-3"}}), "");
    EXPECT_EQ(variable_of(1, {{"SLURM_NTASKS", "99999999999999999999999"}}), "");
}

TEST(LauncherCheck, TheMessageNamesBothCountsTheVariableAndHowToLaunch) {
    const auto claim = launcher_mismatch(1, env_of({{"WORLD_SIZE", "2"}}));
    ASSERT_TRUE(claim.has_value());
    const std::string msg = launcher_mismatch_message(*claim);
    for (const char* part : {"MPI world of 1 rank", "WORLD_SIZE=2", "torchrun", "mpirun -n 2",
                             "srun --mpi=pmix -n 2", "MPISTAGE_ALLOW_SINGLETON=1"}) {
        EXPECT_NE(msg.find(part), std::string::npos) << part << " not in: " << msg;
    }
}

}  // namespace
