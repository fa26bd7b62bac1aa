#!/usr/bin/python3
"""Writes an HDF5 workload for benchmarks/run.sh (DLIO/MLPerf Storage shapes scaled
to this machine): `resnet50`: N samples of 224x224x3 uint8 (~150 KB) + int64 labels, contiguous.
Usage: make_workload.py OUT.h5 N"""
import sys

import h5py
import numpy as np

out, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
with h5py.File(out, "w") as f:
    images = f.create_dataset("images", (n, 224, 224, 3), dtype=np.uint8)
    for start in range(0, n, 256):
        stop = min(n, start + 256)
        images[start:stop] = rng.integers(0, 256, size=(stop - start, 224, 224, 3), dtype=np.uint8)
    f.create_dataset("labels", data=rng.integers(0, 1000, size=n, dtype=np.int64))
