#!/usr/bin/python3
"""Shuffle quality where it matters (issue 40, acceptance 4): the Fashion-MNIST MLP of
examples/python/train_fashion_mnist.py trained on a class-sorted copy of the training file (all
0s, then all 1s, ...) with each order, test accuracy after the last epoch, medians over seeds:

  global   --shuffle global (the whole dataset permuted each epoch: the reference)
  chunks   --shuffle chunks with a stage budget of a quarter of the file per node
  local    --shuffle local (each rank's byte-range shard permuted: with a class-sorted file a
           rank's shard holds only some classes)
  windowed --shuffle chunks with chunks of a whole window (window_chunks 1): a shuffle buffer
           over a sequential read, what a streaming loader's buffer shuffle gives (tf.data
           shuffle(buffer), WebDataset's shuffle buffer) at the same memory

Usage: class_sorted_accuracy.py TRAIN.h5 TEST.h5 [--np 2] [--epochs 3] [--seeds 0,1,2]
                                [--modes global,chunks,local,windowed] [--out PREFIX]
The sorted copy is written next to PREFIX (or in a temporary directory) with h5py.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "python", "train_fashion_mnist.py")


def sorted_copy(src, dst):
    import h5py
    import numpy as np
    with h5py.File(src, "r") as f:
        x, y = f["images"][:], f["labels"][:]
    order = np.argsort(y, kind="stable")
    with h5py.File(dst, "w") as g:
        g["images"] = x[order]
        g["labels"] = y[order]
    return os.path.getsize(dst)


def train(a, path, mode, seed, budget):
    flags = {"global": ["--shuffle", "global"],
             "local": ["--shuffle", "local"],
             "chunks": ["--shuffle", "chunks", "--stage-budget", str(budget)],
             "windowed": ["--shuffle", "chunks", "--stage-budget", str(budget),
                          "--window-chunks", "1"]}[mode]
    cmd = ["mpirun", "-np", str(a.np), "--oversubscribe", "--bind-to", "none", sys.executable,
           EXAMPLE, path, a.test, "--epochs", str(a.epochs), "--seed", str(seed), *flags]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    acc = [float(m) for m in re.findall(r"test accuracy ([0-9.]+) %", out)]
    return acc[-1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("train")
    p.add_argument("test")
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--modes", default="global,chunks,local,windowed")
    p.add_argument("--out", default="")
    a = p.parse_args()
    modes = a.modes.split(",")
    seeds = [int(s) for s in a.seeds.split(",")]
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "train-class-sorted.h5")
        data = sorted_copy(a.train, path)
        budget = data // 4 // a.np  # a quarter of the file per node, split among its ranks
        acc = {m: [] for m in modes}
        for seed in seeds:
            for m in modes:
                acc[m].append(train(a, path, m, seed, budget))
    med = {m: statistics.median(v) for m, v in acc.items()}
    lines = ["| order | test accuracy, median (%) | per seed | × global (points) |",
             "|---|---:|---|---:|"]
    for m in modes:
        lines.append(f"| {m} | {med[m]:.2f} | {', '.join(f'{v:.2f}' for v in acc[m])} | "
                     f"{med[m] - med.get('global', med[m]):+.2f} |")
    table = "\n".join(lines)
    print(table)
    if a.out:
        with open(a.out + ".md", "w") as f:
            f.write(table + "\n")
        with open(a.out + ".json", "w") as f:
            json.dump({"accuracy": acc, "median": med, "budget_bytes_per_rank": budget,
                       "np": a.np, "epochs": a.epochs}, f, indent=1)


if __name__ == "__main__":
    main()
