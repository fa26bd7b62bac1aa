"""mpistage.distributed.init_process_group: torch.distributed started from MPI (2 ranks: only
peers are needed). Known answers come from MPI itself (mpi4py) and the host names of the ranks,
never from the helper."""
import os
import socket

import pytest
import torch
import torch.distributed as dist
from conftest import COMM

import mpistage
from mpistage.distributed import init_process_group


@pytest.fixture(scope="module", autouse=True)
def no_group_left_behind():
    """Every test here starts without a process group, and the module leaves none."""
    if dist.is_initialized():
        dist.destroy_process_group()
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def expect_config_error_everywhere(call, *words):
    """`call` raises mpistage.ConfigError on every rank, with the same message naming `words`."""
    with pytest.raises(mpistage.ConfigError) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message
    assert all(m == message for m in COMM.allgather(message))
    assert not dist.is_initialized()


def test_bad_arguments_are_refused_on_every_rank():
    expect_config_error_everywhere(lambda: init_process_group(backend="carrier-pigeon"),
                                   "backend='carrier-pigeon'", "gloo")
    expect_config_error_everywhere(lambda: init_process_group(backend="gloo", timeout=-1),
                                   "timeout must be positive")
    expect_config_error_everywhere(lambda: init_process_group(backend=3), "backend must be a str")
    # One rank's bad argument is every rank's error, naming that rank.
    bad = "carrier-pigeon" if COMM.rank == COMM.size - 1 else "gloo"
    expect_config_error_everywhere(lambda: init_process_group(backend=bad),
                                   "backend='carrier-pigeon'", f"(rank {COMM.size - 1})")
    with pytest.raises(TypeError, match="comm must be an mpi4py.MPI.Intracomm"):
        init_process_group(comm="world")


def test_a_launcher_disagreeing_with_mpi_is_refused(monkeypatch):
    # As torchrun would set it on a rank MPI numbers differently.
    if COMM.rank == 0:
        monkeypatch.setenv("RANK", str(COMM.size))
    expect_config_error_everywhere(lambda: init_process_group(backend="gloo"),
                                   f"RANK={COMM.size} in the environment but MPI says 0",
                                   "(rank 0)")


def test_process_group_matches_mpi_and_all_reduce_works():
    info = init_process_group(backend="gloo", timeout=60)
    assert dist.is_initialized()
    assert (dist.get_rank(), dist.get_world_size()) == (COMM.rank, COMM.size)
    assert (info.rank, info.world_size, info.backend) == (COMM.rank, COMM.size, "gloo")
    assert dist.get_backend() == "gloo"
    # LOCAL_RANK / LOCAL_WORLD_SIZE: this rank's place among the ranks on its host.
    hosts = COMM.allgather(socket.gethostname())
    mine = [r for r, h in enumerate(hosts) if h == hosts[COMM.rank]]
    assert (info.local_rank, info.local_world_size) == (mine.index(COMM.rank), len(mine))
    # The rendezvous is rank 0's, the same on every rank.
    assert all(a == (info.master_addr, info.master_port)
               for a in COMM.allgather((info.master_addr, info.master_port)))
    assert 0 < info.master_port < 65536
    expected_env = {"RANK": COMM.rank, "WORLD_SIZE": COMM.size, "LOCAL_RANK": info.local_rank,
                    "LOCAL_WORLD_SIZE": info.local_world_size, "MASTER_ADDR": info.master_addr,
                    "MASTER_PORT": info.master_port}
    for name, value in expected_env.items():
        assert os.environ[name] == str(value)
    # A collective of the group: the sum of rank + 1 over the ranks.
    t = torch.tensor([COMM.rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == COMM.size * (COMM.size + 1) / 2
    # A second call is refused, on every rank, and leaves the group as it is.
    with pytest.raises(mpistage.ConfigError, match="already initialised"):
        init_process_group(backend="gloo")
    assert dist.get_world_size() == COMM.size
    dist.destroy_process_group()
