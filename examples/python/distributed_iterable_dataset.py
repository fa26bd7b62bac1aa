"""The seed's ``DistributedIterableDataset`` rewritten on mpistage.

The usual version shards one iterable of records across ranks with
``itertools.islice(records, rank, None, world_size)`` inside an ``IterableDataset``: with N not
divisible by W (or a filter dropping records unevenly) ranks yield different numbers of batches,
and the first DDP allreduce after the shortest rank finished hangs forever.

Here every rank opens the same record iterable, mpistage's stream loader gives rank r the chunks
c with (c + s) mod W = r (each record exactly once), batches them, and agrees at each step
whether any rank still holds records, moving records to ranks that ran dry
(``remainder="rebalance"``) so all ranks take the same number of steps.

    mpirun -np 3 python3 examples/python/distributed_iterable_dataset.py [N]
"""
import sys

import numpy as np
import torch.utils.data
from mpi4py import MPI

import mpistage


def records(n):
    """The record iterable every rank can open: (features float32 [4], label int64)."""
    for i in range(n):
        yield {"features": np.full(4, i, dtype=np.float32), "label": i}


class DistributedIterableDataset(torch.utils.data.IterableDataset):
    """Batches of ``records(n)`` sharded over the ranks of ``comm``: exactly once, equal steps.
    Use with ``DataLoader(ds, batch_size=None)``; each iteration is the next epoch."""

    def __init__(self, n, batch_size=8, comm=None):
        super().__init__()
        fields = [mpistage.Field("features", "float32", (4,)), mpistage.Field("label", "int64")]
        self.source = mpistage.stream_source(fields, lambda s: records(n), 1,
                                             fingerprint=f"records({n})")
        self.loader = mpistage.Loader(self.source, comm=comm, sharding="chunk",
                                      chunk_size=4, batch_size=batch_size, timeout=60)
        self.dataset = mpistage.LoaderDataset(self.loader)

    def __iter__(self):
        return iter(self.dataset)


def run(n=103, comm=MPI.COMM_WORLD):
    """Returns (steps, labels seen by this rank)."""
    ds = DistributedIterableDataset(n, comm=comm)
    steps, labels = 0, []
    for batch in torch.utils.data.DataLoader(ds, batch_size=None):
        steps += 1
        labels.extend(batch["label"][batch.valid].tolist())
        assert torch.equal(batch["features"][batch.valid][:, 0].long(),
                           batch["label"][batch.valid])
    return steps, labels


if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    steps, labels = run(int(sys.argv[1]) if len(sys.argv) > 1 else 103)
    counts = comm.gather((steps, len(labels)), root=0)
    if comm.rank == 0:
        print("steps per rank:", [c[0] for c in counts], "records per rank:", [c[1] for c in counts])
