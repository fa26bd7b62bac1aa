"""The launcher check from Python (issue "For PyTorch users", acceptance 2): processes started
without an MPI launcher are each an MPI world of one; when their environment says the job has
more tasks (torchrun's WORLD_SIZE/RANK, Slurm's SLURM_NTASKS in a batch script without srun) the
first collective object refuses with mpistage.ConfigError naming both counts and the variable,
in under 5 s, instead of reading the whole dataset in every process.

The processes under test are children started here with a scrubbed environment (no variable of
the launcher that started pytest), so this file runs the same under mpirun or alone. Only rank 0
starts them: the test makes no collective call after its fixture."""
import os
import subprocess
import sys
import time

import pytest
from mpi4py import MPI

from conftest import COMM

CHILD = r"""
import sys, time
import mpistage
start = time.monotonic()
try:
    source = mpistage.open_source(sys.argv[1], fields=["x", "y"])
    loader = mpistage.Loader(source, batch_size=8, remainder="mask")
    n = sum(int(b.valid.sum()) for b in loader.epoch(0))
    print("STAGED", n)
except mpistage.ConfigError as e:
    print("CONFIGERROR %.3f %s" % (time.monotonic() - start, e))
    sys.exit(3)
"""

LAUNCHER_PREFIXES = ("OMPI_", "PMIX_", "PMI_", "HYDRA_", "MPIR_", "SLURM_", "MV2_")
LAUNCHER_NAMES = {"WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR",
                  "MASTER_PORT", "MPISTAGE_ALLOW_SINGLETON"}


def scrubbed(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(LAUNCHER_PREFIXES) and k not in LAUNCHER_NAMES}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def start(path, **extra):
    return subprocess.Popen([sys.executable, "-c", CHILD, path], env=scrubbed(**extra),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc):
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out


rank0_only = pytest.mark.skipif(COMM.rank != 0, reason="processes are started by rank 0 only")


@rank0_only
def test_two_processes_started_like_torchrun_are_refused(small_h5):
    t0 = time.monotonic()
    procs = [start(small_h5, WORLD_SIZE=2, LOCAL_WORLD_SIZE=2, RANK=r, LOCAL_RANK=r,
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=29500) for r in (0, 1)]
    results = [finish(p) for p in procs]
    for rc, out in results:
        assert rc == 3, out
        assert "CONFIGERROR" in out and "STAGED" not in out, out
        assert "MPI world of 1 rank, but WORLD_SIZE=2" in out, out
        assert "mpirun -n 2" in out and "MPISTAGE_ALLOW_SINGLETON=1" in out, out
        refused_after = float(out.split("CONFIGERROR ")[1].split()[0])
        assert refused_after < 5.0, out
    assert time.monotonic() - t0 < 60


@rank0_only
def test_a_singleton_inside_an_sbatch_allocation_is_refused(small_h5):
    rc, out = finish(start(small_h5, SLURM_NTASKS=2, SLURM_NPROCS=2, SLURM_JOB_ID=1))
    assert rc == 3, out
    assert "MPI world of 1 rank, but SLURM_NTASKS=2" in out, out
    assert "srun --mpi=pmix -n 2" in out, out


@rank0_only
def test_the_opt_out_stages_the_whole_dataset_in_one_process(small_h5):
    rc, out = finish(start(small_h5, WORLD_SIZE=2, RANK=1, MPISTAGE_ALLOW_SINGLETON=1))
    assert rc == 0, out
    # small_h5 holds 103 samples (conftest); remainder "mask" delivers each once.
    assert "STAGED 103" in out, out
