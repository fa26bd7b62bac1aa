#!/usr/bin/python3
"""Contention benchmark (run through benchmarks/run.sh, or alone): Fashion-MNIST staged in
memory with a global shuffle (mpistage stage --stage memory --shuffle global --sharding
global) beside PyTorch in memory (torch_baselines.py memory), idle and with one competing busy
process per core (`yes > /dev/null`, pinned to its core with taskset), each with the
launcher's default binding (Open MPI binds each of up to 2 ranks to its own core) and with
`--bind-to none`. Steady state as side_by_side.py: (T(E) - T(1)) / (E - 1), medians of RUNS
runs after a warm-up run.

mpistage runs at the prefetch depths of CONTENTION_PREFETCH (default 4,64,512): 4 is
side_by_side.py's; 512 exceeds an epoch's 469 steps per rank, so the ring holds the whole epoch
(the loader clamps it to the steps: 469 x 50 KB per rank). Reads from the memory tier are
promised, so a rank runs about 50 ms of steps ahead of a descheduled peer whatever the ring
(docs/architecture.md "Agreement that does not wait on scheduling"; README "Binding and shared
cores"); the deeper rings show whether the depth still matters.

Usage: contention.py BUILD_DIR WORK_DIR NP RUNS OUT_PREFIX   (WORK_DIR/fmnist.h5 must exist)
Writes OUT_PREFIX.json (every run) and OUT_PREFIX.md (the table).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys

from side_by_side import PY, HERE, steady, steady_epoch_seconds

EPOCHS = 6
BATCH = 64
PREFETCHES = tuple(int(p) for p in os.environ.get("CONTENTION_PREFETCH", "4,64,512").split(","))


def launcher(np_, binding):
    env = ["-x", "LD_LIBRARY_PATH"] if os.environ.get("LD_LIBRARY_PATH") else []
    bind = ["--bind-to", "none"] if binding == "none" else []
    return ["mpirun", "-np", str(np_), *bind, *env]


def run_mpistage(build, work, np_, binding, prefetch):
    out = os.path.join(work, "contention.json")
    cmd = [os.path.join(build, "mpistage"), "stage", os.path.join(work, "fmnist.h5"),
           "--field", "images", "--field", "labels", "--batch-size", str(BATCH),
           "--epochs", str(EPOCHS), "--shuffle", "global", "--sharding", "global",
           "--remainder", "pad", "--threads", "1", "--prefetch", str(prefetch),
           "--stage", "memory", "--quiet", "--json", out]
    subprocess.run(launcher(np_, binding) + cmd, check=True)
    with open(out) as f:
        j = json.load(f)
    return {"samples": j["num_samples"], "epoch_seconds": [e["seconds"] for e in j["epochs"]]}


def run_torch(work, np_, binding):
    cmd = [PY, os.path.join(HERE, "torch_baselines.py"), "memory",
           os.path.join(work, "fmnist.h5"), str(BATCH), str(EPOCHS), "images", "labels"]
    r = subprocess.run(launcher(np_, binding) + cmd, check=True, capture_output=True, text=True)
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return {"samples": j["samples_per_epoch"], "epoch_seconds": j["epoch_seconds"]}


class BusyCores:
    """One `yes > /dev/null` per core, pinned to it when taskset exists."""

    def __enter__(self):
        self.procs = []
        pin = shutil.which("taskset")
        for core in range(os.cpu_count() or 1):
            cmd = ([pin, "-c", str(core)] if pin else []) + ["yes"]
            self.procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL))
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def measure(build, work, np_, runs):
    """{(load, binding, method): [run, ...]}, with the load average before each cell."""
    results, loads = {}, {}
    methods = [(f"mpistage staged global, prefetch {p}",
                lambda b, p=p: run_mpistage(build, work, np_, b, p)) for p in PREFETCHES]
    methods.append(("torch in memory (expert)", lambda b: run_torch(work, np_, b)))
    for load in ("idle", "busy process per core"):
        for binding in ("default", "none"):
            loads[(load, binding)] = load_average()
            for name, fn in methods:
                if load == "idle":
                    rs = [fn(binding) for _ in range(runs + 1)][1:]
                else:
                    with BusyCores():
                        rs = [fn(binding) for _ in range(runs + 1)][1:]
                results[(load, binding, name)] = rs
                sps = statistics.median(steady(r) for r in rs)
                print(f"{load:22s} bind {binding:8s} {name:40s} {sps / 1e6:8.3f} M samples/s",
                      flush=True)
    return results, loads


def report(results, loads, np_, runs, out):
    lines = [f"np={np_}, {os.cpu_count()} cores, medians of {runs} runs after a warm-up, "
             f"{EPOCHS} epochs, batch {BATCH}; load average (1/5/15 min) before each cell.", "",
             "| load | binding | method | steady samples/s | steady epoch s | "
             "x torch in memory (same cell) |", "|---|---|---|---:|---:|---:|"]
    for (load, binding), la in loads.items():
        cell = {k[2]: v for k, v in results.items() if k[:2] == (load, binding)}
        torch = statistics.median(steady(r) for r in cell["torch in memory (expert)"])
        for name, rs in cell.items():
            sps = statistics.median(steady(r) for r in rs)
            ep = statistics.median(steady_epoch_seconds(r) for r in rs)
            lines.append(f"| {load} (load avg {la}) | {binding} | {name} | {sps:,.0f} | "
                         f"{ep:.4f} | {sps / torch:.2f} |")
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(out + ".json", "w") as f:
        json.dump({" | ".join(k): v for k, v in results.items()}, f, indent=1)
    print("\n".join(lines))


def main():
    build, work, np_, runs, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
        int(sys.argv[4]), sys.argv[5]
    results, loads = measure(build, work, np_, runs)
    report(results, loads, np_, runs, out)


if __name__ == "__main__":
    main()
