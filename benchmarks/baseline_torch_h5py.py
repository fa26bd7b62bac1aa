#!/usr/bin/python3
"""Baseline for benchmarks/stage_vs_torch.sh: what users would pick instead of mpistage.

PyTorch DataLoader + DistributedSampler + h5py, one process per MPI rank (rank and world size
from mpi4py), the same file, fields, batch size and epochs as the mpistage run. Prints one JSON
line from rank 0: {"bytes": total bytes delivered over all ranks, "seconds": slowest rank}.
Runs with Debian's /usr/bin/python3 (python3-torch, python3-h5py, python3-mpi4py).
"""
import json
import sys
import time

import h5py
import numpy as np
import torch
from mpi4py import MPI
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class H5Dataset(Dataset):
    def __init__(self, path, fields):
        self.path = path
        self.fields = fields
        with h5py.File(path, "r") as f:
            self.n = f[fields[0]].shape[0]
        self.file = None  # opened lazily in each worker (h5py handles must not cross fork)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.file is None:
            self.file = h5py.File(self.path, "r")
        return tuple(torch.from_numpy(np.asarray(self.file[name][i])) for name in self.fields)


def main():
    path, batch_size, epochs, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    fields = sys.argv[5:]
    comm = MPI.COMM_WORLD
    ds = H5Dataset(path, fields)
    sampler = DistributedSampler(ds, num_replicas=comm.size, rank=comm.rank, shuffle=True,
                                 drop_last=False, seed=0)
    loader = DataLoader(ds, batch_size=batch_size, sampler=sampler, num_workers=workers,
                        prefetch_factor=2 if workers > 0 else None)
    comm.Barrier()
    start = time.perf_counter()
    nbytes = 0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            nbytes += sum(t.numel() * t.element_size() for t in batch)
    seconds = time.perf_counter() - start
    total = comm.reduce(nbytes, op=MPI.SUM, root=0)
    slowest = comm.reduce(seconds, op=MPI.MAX, root=0)
    if comm.rank == 0:
        print(json.dumps({"bytes": total, "seconds": slowest}))


if __name__ == "__main__":
    main()
