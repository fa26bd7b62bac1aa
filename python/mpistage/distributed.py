"""torch.distributed started from MPI: the processes that ``mpirun -n N`` or ``srun --mpi=pmix``
started become torch's process group, without torchrun and without a hand-written bootstrap.

    from mpistage.distributed import init_process_group
    info = init_process_group()            # collective over COMM_WORLD
    model = torch.nn.parallel.DistributedDataParallel(model)

MPI gives rank and world size; this module derives torch's environment (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) from it
and initialises ``torch.distributed`` with ``init_method="env://"``.
"""
import datetime
import os
import socket
from typing import NamedTuple

from mpi4py import MPI

from ._mpistage import ConfigError

__all__ = ["ProcessGroupInfo", "init_process_group"]

_BACKENDS = ("gloo", "nccl", "mpi")


class ProcessGroupInfo(NamedTuple):
    """What :func:`init_process_group` derived (identical on every rank but the rank fields)."""
    rank: int               #: this process's rank in ``comm`` and in the process group
    world_size: int         #: ranks in ``comm`` (= the process group's size)
    local_rank: int         #: rank among the ranks of ``comm`` on this node (shared memory)
    local_world_size: int   #: ranks of ``comm`` on this node
    master_addr: str        #: rank 0's address (127.0.0.1 when every rank is on one node)
    master_port: int        #: the TCP port of torch's rendezvous store on rank 0
    backend: str            #: the backend the group was initialised with


def _agree(comm, problem):
    """Collective: raises the same ConfigError on every rank when any rank has a problem (the
    lowest such rank's message, naming it); returns otherwise."""
    problems = comm.allgather(problem)
    for rank, text in enumerate(problems):
        if text is not None:
            raise ConfigError(f"mpistage.distributed.init_process_group: {text} (rank {rank})")


def _check_arguments(backend, timeout, comm):
    """(backend or None, timedelta or None, problem or None) for this rank's arguments."""
    import torch
    import torch.distributed as dist

    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if not isinstance(backend, str):
        return None, None, (f"backend must be a str ({', '.join(_BACKENDS)}) or None, "
                            f"not {type(backend).__name__}")
    backend = backend.lower()
    available = {"gloo": dist.is_gloo_available, "nccl": dist.is_nccl_available,
                 "mpi": dist.is_mpi_available}
    if backend not in available:
        return None, None, f"backend={backend!r} is not one of {', '.join(_BACKENDS)}"
    if not available[backend]():
        return None, None, f"backend={backend!r} is not available in this torch {torch.__version__}"
    if backend == "nccl" and not torch.cuda.is_available():
        return None, None, "backend='nccl' needs a CUDA device, and torch sees none"
    if timeout is not None:
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
            timeout = datetime.timedelta(seconds=timeout)
        if not isinstance(timeout, datetime.timedelta):
            return None, None, ("timeout must be seconds (a number) or a datetime.timedelta, "
                                f"not {type(timeout).__name__}")
        if timeout.total_seconds() <= 0:
            return None, None, f"timeout must be positive, not {timeout.total_seconds()} s"
    if dist.is_initialized():
        return None, None, "torch.distributed is already initialised in this process"
    # Variables a launcher set must agree with MPI: a mismatch means two launchers disagree on
    # who is who, and torch and mpistage would shard by different ranks.
    for name, mine in (("RANK", comm.rank), ("WORLD_SIZE", comm.size)):
        value = os.environ.get(name)
        if value is not None and value != str(mine):
            return None, None, (f"{name}={value} in the environment but MPI says {mine}; start "
                                "the job with one launcher (mpirun -n N or srun --mpi=pmix, "
                                "not torchrun)")
    return backend, timeout, None


def _rendezvous_address(single_node):
    """Rank 0's (address, free port): loopback when every rank shares its node, else a
    non-loopback IPv4 address of its host name (the host name itself when it has none)."""
    if single_node:
        addr = "127.0.0.1"
    else:
        host = socket.gethostname()
        addr = host
        try:
            for *_, sockaddr in socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM):
                if not sockaddr[0].startswith("127."):
                    addr = sockaddr[0]
                    break
        except OSError:
            pass
    # Port 0: the kernel picks a free port; torch's store binds it again right after (another
    # process could take it in between, which torch then reports as "address in use").
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1" if single_node else "", 0))
        port = s.getsockname()[1]
    return addr, port


def init_process_group(backend=None, timeout=None, comm=None):
    """Collective over ``comm``: initialises ``torch.distributed`` for the ranks of ``comm``.

    Args:
        backend: ``"gloo"``, ``"nccl"`` or ``"mpi"``; ``None`` (default): ``"nccl"`` when
            ``torch.cuda.is_available()``, else ``"gloo"``. With ``"nccl"`` the current CUDA
            device becomes ``LOCAL_RANK % torch.cuda.device_count()``.
        timeout: the process group's timeout (seconds, or a ``datetime.timedelta``);
            ``None``: torch's default (30 minutes). It also bounds how long the ranks wait for
            each other inside torch's initialisation.
        comm: an ``mpi4py.MPI.Intracomm`` (default ``MPI.COMM_WORLD``); the process group has
            its ranks, in its order.

    Sets in ``os.environ`` of every rank: ``RANK``, ``WORLD_SIZE`` (from ``comm``),
    ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` (the ranks of ``comm`` sharing this node,
    ``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)``), ``MASTER_ADDR`` (``127.0.0.1`` when every
    rank is on one node, else a non-loopback IPv4 address of rank 0's host) and
    ``MASTER_PORT`` (a port rank 0 found free), both broadcast from rank 0; then calls
    ``torch.distributed.init_process_group(backend, init_method="env://", rank, world_size)``.

    Returns:
        ProcessGroupInfo (rank, world_size, local_rank, local_world_size, master_addr,
        master_port, backend).

    Raises:
        TypeError: ``comm`` is not an ``mpi4py.MPI.Intracomm`` (raised before any collective,
            so only where it is wrong).
        mpistage.ConfigError: on every rank, naming the rank, when any rank's arguments are
            invalid (unknown or unavailable backend, nccl without CUDA, a non-positive timeout),
            torch.distributed is already initialised there, or ``RANK``/``WORLD_SIZE`` in its
            environment disagree with MPI (two launchers).
        Errors of torch's own initialisation are torch's, on the rank where it failed; the other
            ranks then get torch's timeout error after at most ``timeout``.

    Not thread safe: call it once, from the main thread, on every rank of ``comm``.
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    if not isinstance(comm, MPI.Intracomm):
        raise TypeError(f"mpistage.distributed.init_process_group: comm must be an "
                        f"mpi4py.MPI.Intracomm (or None for COMM_WORLD), not {type(comm).__name__}")
    try:
        backend, timeout, problem = _check_arguments(backend, timeout, comm)
    except ImportError as e:  # torch missing on this rank
        backend, timeout, problem = None, None, f"torch cannot be imported ({e})"
    _agree(comm, problem)

    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    try:
        local_rank, local_world_size = local.rank, local.size
    finally:
        local.Free()
    single_node = comm.allreduce(local_world_size, op=MPI.MIN) == comm.size

    address, problem = None, None
    if comm.rank == 0:
        try:
            address = _rendezvous_address(single_node)
        except OSError as e:
            problem = f"no free TCP port for torch's store on rank 0: {e}"
    address, problem = comm.bcast((address, problem), root=0)
    _agree(comm, problem)
    master_addr, master_port = address

    os.environ.update({
        "RANK": str(comm.rank), "WORLD_SIZE": str(comm.size),
        "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(local_world_size),
        "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port),
    })

    import torch
    import torch.distributed as dist

    if backend == "nccl":
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    kwargs = {} if timeout is None else {"timeout": timeout}
    dist.init_process_group(backend, init_method="env://", rank=comm.rank,
                            world_size=comm.size, **kwargs)
    return ProcessGroupInfo(comm.rank, comm.size, local_rank, local_world_size, master_addr,
                            master_port, backend)
