#!/usr/bin/python3
"""Fashion-MNIST side by side from Python (issue 20): mpistage driven from Python (staged in
memory, global shuffle; and from the file) against PyTorch in memory (torch_baselines.py
memory: h5py reads each field whole, DistributedSampler order) and DataLoader +
DistributedSampler + h5py (naive), on the same HDF5 file, batch size and ranks, in one run,
alternating the methods run by run. Steady-state samples/s as side_by_side.py computes it
((T(E) - T(1)) / (E - 1) per epoch), medians of RUNS runs after a warm-up run each (the naive
baseline: 1 run of 2 epochs, no warm-up), and mpistage's Python overhead per batch.

Usage: python_vs_torch.py BUILD_DIR FILE.h5 NP RUNS [EPOCHS]   (PYTHONPATH is set from BUILD_DIR)
Prints a Markdown table.
"""
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from side_by_side import PY, mpirun, steady  # noqa: E402


def run(np_, build, args):
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"))
    r = subprocess.run(mpirun(np_, ["-x", "PYTHONPATH", PY, *args]), check=True,
                       capture_output=True, text=True, env=env)
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return {"samples": j["samples_per_epoch"], "epoch_seconds": j["epoch_seconds"],
            "overhead_us": j.get("python_overhead_us_per_batch")}


def main():
    build, path, np_, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    epochs = int(sys.argv[5]) if len(sys.argv) > 5 else 11
    fields = ["images", "labels"]
    batch = "64"
    methods = {
        "mpistage from Python, stage=memory shuffle=global":
            [os.path.join(HERE, "python_loader.py"), "memory", "global", path, batch,
             str(epochs), *fields],
        "mpistage from Python, stage=none shuffle=global":
            [os.path.join(HERE, "python_loader.py"), "none", "global", path, batch,
             str(epochs), *fields],
        "torch in memory (expert)":
            [os.path.join(HERE, "torch_baselines.py"), "memory", path, batch, str(epochs),
             *fields],
    }
    results = {k: [] for k in methods}
    for i in range(runs + 1):
        for name, args in methods.items():
            r = run(np_, build, args)
            if i > 0:
                results[name].append(r)
    if not os.environ.get("SKIP_NAIVE"):
        results["torch DataLoader+DistributedSampler+h5py (naive)"] = [run(np_, build, [
            os.path.join(HERE, "torch_baselines.py"), "naive", path, batch, "2", *fields])]
    base = statistics.median(steady(r) for r in results["torch in memory (expert)"])
    print(f"| method ({np_} ranks, batch {batch}/rank, median of {runs}) | samples/s | "
          "x torch in memory | Python overhead µs/batch |")
    print("|---|---:|---:|---:|")
    for name, rs in results.items():
        sps = statistics.median(steady(r) for r in rs)
        ov = [r["overhead_us"] for r in rs if r.get("overhead_us") is not None]
        ov_text = f"{statistics.median(ov):.1f}" if ov else "-"
        print(f"| {name} | {sps:,.0f} | {sps / base:.2f} | {ov_text} |")
    print(json.dumps(results), file=sys.stderr)


if __name__ == "__main__":
    main()
