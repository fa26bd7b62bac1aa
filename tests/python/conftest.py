"""Shared fixtures of the Python tests, run under mpirun: every rank runs every test in the same
order, so a test's collectives match across ranks. Known answers come from h5py / numpy (the
writers), never from mpistage. They test whichever mpistage Python imports: the build tree's
(PYTHONPATH=<build>/python, the per-file ctests) or an installed one (python.pip_install); the
header of the run names it."""
import os
import shutil
import tempfile

import numpy as np
import pytest
from mpi4py import MPI

import mpistage  # noqa: F401  (imports mpi4py.MPI first)

COMM = MPI.COMM_WORLD
# A short watchdog: a test whose ranks diverge ends the job instead of hanging ctest.
TIMEOUT = 60


def shared_tmpdir():
    """A directory made by rank 0 and known to every rank."""
    path = tempfile.mkdtemp(prefix="mpistage-py-") if COMM.rank == 0 else None
    return COMM.bcast(path, root=0)


@pytest.fixture(scope="session")
def workdir():
    path = shared_tmpdir()
    yield path
    COMM.Barrier()
    if COMM.rank == 0:
        shutil.rmtree(path, ignore_errors=True)


def write_h5(path, n, features=3):
    """x float32 [n, features] = id * 10 + column, y int64 [n] = id (rank 0 writes)."""
    if COMM.rank == 0:
        import h5py
        with h5py.File(path, "w") as f:
            f["x"] = (np.arange(n)[:, None] * 10 + np.arange(features)[None, :]).astype(np.float32)
            f["y"] = np.arange(n, dtype=np.int64)
    COMM.Barrier()
    return path


@pytest.fixture(scope="session")
def small_h5(workdir):
    """103 samples: not divisible by any batch size or world size the tests use."""
    return write_h5(os.path.join(workdir, "small.h5"), 103)


def gather_ids(ids, comm=COMM):
    """Every rank's ids, concatenated in rank order (on every rank)."""
    return np.concatenate([np.asarray(a, dtype=np.int64) for a in comm.allgather(list(ids))])


def same_on_every_rank(value, comm=COMM):
    return all(v == value for v in comm.allgather(value))


def pytest_report_header(config):
    return f"mpistage {mpistage.__version__} from {os.path.dirname(mpistage.__file__)}"
