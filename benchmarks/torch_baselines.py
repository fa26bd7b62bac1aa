#!/usr/bin/python3
"""PyTorch baselines for benchmarks/run.sh, one process per MPI rank (mpi4py), same file,
fields, batch size and epochs as the mpistage runs.

  naive:  DataLoader + DistributedSampler + an h5py Dataset reading one row per __getitem__
          (num_workers=0; prefetch_factor is not passed, which this PyTorch rejects with 0 workers)
  memory: the expert user: h5py reads every field whole once, then each epoch indexes the
          tensors with DistributedSampler's order, one batch at a time

With --compute-us=US, each step sleeps US microseconds after its batch (DLIO's emulated
computation_time, the same as `mpistage stage --compute-us`).

Prints one JSON line from rank 0: {"load_seconds": slowest rank's full read (memory) or 0,
"epoch_seconds": [slowest rank per epoch], "samples_per_epoch": samples over all ranks,
"steps_per_epoch": the most batches one rank took in an epoch}.
Usage: torch_baselines.py [--compute-us=US] naive|memory FILE BATCH EPOCHS FIELD...
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


class H5Rows(Dataset):
    def __init__(self, path, fields):
        self.path, self.fields, self.file = path, fields, None
        with h5py.File(path, "r") as f:
            self.n = f[fields[0]].shape[0]

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.file is None:
            self.file = h5py.File(self.path, "r")
        return tuple(torch.from_numpy(np.asarray(self.file[name][i])) for name in self.fields)


class Indices(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def compute(seconds):
    """The emulated training step (DLIO: a sleep of computation_time per step)."""
    if seconds > 0:
        time.sleep(seconds)


def epochs_naive(comm, path, batch, epochs, fields, step_s):
    ds = H5Rows(path, fields)
    sampler = DistributedSampler(ds, num_replicas=comm.size, rank=comm.rank, shuffle=True, seed=0)
    loader = DataLoader(ds, batch_size=batch, sampler=sampler, num_workers=0)
    times, count, steps = [], 0, 0
    for e in range(epochs):
        sampler.set_epoch(e)
        comm.Barrier()
        t0 = time.perf_counter()
        for b in loader:
            count += b[0].shape[0]
            steps += 1
            compute(step_s)
        times.append(time.perf_counter() - t0)
    return 0.0, times, count // epochs, steps // epochs


def epochs_memory(comm, path, batch, epochs, fields, step_s):
    comm.Barrier()
    t0 = time.perf_counter()
    with h5py.File(path, "r") as f:
        tensors = [torch.from_numpy(f[name][...]) for name in fields]
    load = time.perf_counter() - t0
    sampler = DistributedSampler(Indices(tensors[0].shape[0]), num_replicas=comm.size,
                                 rank=comm.rank, shuffle=True, seed=0)
    times, count, steps = [], 0, 0
    for e in range(epochs):
        sampler.set_epoch(e)
        comm.Barrier()
        t0 = time.perf_counter()
        order = torch.tensor(list(sampler))
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            b = [t[idx] for t in tensors]
            count += b[0].shape[0]
            steps += 1
            compute(step_s)
        times.append(time.perf_counter() - t0)
    return load, times, count // epochs, steps // epochs


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--compute-us=")]
    step_s = sum(int(a.split("=", 1)[1]) for a in sys.argv[1:]
                 if a.startswith("--compute-us=")) / 1e6
    mode, path, batch, epochs = args[0], args[1], int(args[2]), int(args[3])
    fields = args[4:]
    comm = MPI.COMM_WORLD
    run = epochs_naive if mode == "naive" else epochs_memory
    load, times, count, steps = run(comm, path, batch, epochs, fields, step_s)
    load = comm.reduce(load, op=MPI.MAX, root=0)
    times = [comm.reduce(t, op=MPI.MAX, root=0) for t in times]
    count = comm.reduce(count, op=MPI.SUM, root=0)
    steps = comm.reduce(steps, op=MPI.MAX, root=0)
    if comm.rank == 0:
        print(json.dumps({"load_seconds": load, "epoch_seconds": times,
                          "samples_per_epoch": count, "steps_per_epoch": steps}))


if __name__ == "__main__":
    main()
