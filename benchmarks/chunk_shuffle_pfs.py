#!/usr/bin/python3
"""Data larger than the budget under the parallel-file-system model (issue 40, acceptance 3):
`mpistage stage --shuffle chunks` (clairvoyant chunk read-ahead, a budget of a quarter of the
data) against the all-in-memory staged rate on the same file (`--stage memory --shuffle
global`) and against the unstaged global shuffle (`--shuffle global --stage none`: one small
read per sample), side by side, runs interleaved, medians.

Every run has the shim preloaded (benchmarks/pfs/pfs_model.c, its defaults: 1 ms per request,
2 GB/s per process, unless MPISTAGE_PFS_LATENCY_US / MPISTAGE_PFS_BANDWIDTH are set). The
rate of a run is the valid samples of all ranks over the slowest rank's seconds of the epochs
after the first (the staged method's staging read and the first epoch's page-cache warm-up are
outside; the unstaged global shuffle, which takes minutes per epoch under the model, runs
--stop-after-steps GLOBAL_STEPS of one epoch instead). `--compute-ms` sleeps per step as a
trainer computes (0: the loader alone, bound by the modelled link).

FILE is any input `mpistage stage` takes (HDF5, TFRecord, ...). `--baseline OTHER_CLI` adds
`--shuffle chunks` of another build, interleaved with the rest (e.g. the build before a change).

Usage: chunk_shuffle_pfs.py MPISTAGE_CLI PFS_SHIM.so FILE [--np 2] [--runs 3] [--epochs 3]
                            [--batch-size 64] [--compute-ms 0,2] [--global-steps 40]
                            [--threads 4] [--baseline OTHER_CLI] [--out PREFIX]
Prints a Markdown table; with --out writes PREFIX.md and PREFIX.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile


def run(a, method, compute_ms, work):
    out = os.path.join(work, f"{method}-{compute_ms}.json")
    root = os.environ.get("MPISTAGE_PFS_ROOT", os.path.dirname(os.path.abspath(a.file)))
    env = ["-x", f"LD_PRELOAD={a.pfs}", "-x", f"MPISTAGE_PFS_ROOT={root}"]
    env += [x for k in ("MPISTAGE_PFS_LATENCY_US", "MPISTAGE_PFS_BANDWIDTH")
            if k in os.environ for x in ("-x", k)]
    data_bytes = os.path.getsize(a.file)
    budget = data_bytes // 4 // a.np  # the node's budget a quarter of the data
    flags = {
        "memory": ["--shuffle", "global", "--stage", "memory"],
        "chunks": ["--shuffle", "chunks", "--stage-budget", str(budget)],
        "baseline": ["--shuffle", "chunks", "--stage-budget", str(budget)],
        "global": ["--shuffle", "global", "--stage", "none", "--stop-after-steps",
                   str(a.global_steps)],
    }[method]
    epochs = 1 if method == "global" else a.epochs
    cli = a.baseline if method == "baseline" else a.cli
    cmd = ["mpirun", "-np", str(a.np), "--oversubscribe", "--bind-to", "none", *env, cli,
           "stage", a.file, "--batch-size", str(a.batch_size), "--epochs", str(epochs),
           "--threads", str(a.threads), "--device", "cpu", "--quiet", "--json", out,
           "--compute-ms", str(compute_ms), *flags]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        j = json.load(f)
    eps = j["epochs"] if method == "global" else j["epochs"][1:]
    rate = sum(e["valid_samples"] for e in eps) / sum(e["seconds"] for e in eps)
    extra = {}
    if method in ("chunks", "baseline"):
        extra = {"read_ahead": [r["read_ahead"] for r in j["ranks"]],
                 "shuffle_note": j["stage"]["shuffle_note"],
                 "quality": j["epochs"][-1].get("shuffle_quality")}
    return rate, extra, budget


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cli")
    p.add_argument("pfs")
    p.add_argument("file")
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--compute-ms", default="0,2")
    p.add_argument("--global-steps", type=int, default=40)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--baseline", default="")
    p.add_argument("--out", default="")
    a = p.parse_args()
    methods = ["memory", "chunks", "global"] + (["baseline"] if a.baseline else [])
    results = []
    with tempfile.TemporaryDirectory() as work:
        for compute in [int(c) for c in a.compute_ms.split(",")]:
            rates = {m: [] for m in methods}
            extras = {}
            for _ in range(a.runs):
                for m in methods:  # interleaved: load changes hit every method alike
                    rate, extra, budget = run(a, m, compute, work)
                    rates[m].append(rate)
                    extras[m] = extra
            med = {m: statistics.median(v) for m, v in rates.items()}
            results.append({"compute_ms": compute, "rates": rates, "median": med,
                            "chunks_vs_memory": med["chunks"] / med["memory"],
                            "chunks_vs_global": med["chunks"] / med["global"],
                            "budget_bytes_per_rank": budget, "data_bytes": os.path.getsize(a.file),
                            "chunks": extras["chunks"], "baseline": extras.get("baseline")})
    base_head = " | chunks, baseline build | chunks × baseline" if a.baseline else ""
    lines = ["| compute ms/step | staged in memory (samples/s) | chunks, budget ¼ of the data "
             "| unstaged global | chunks × memory | chunks × global" + base_head + " |",
             "|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if a.baseline else "")]
    for r in results:
        m = r["median"]
        base = (f" | {m['baseline']:.0f} | {m['chunks'] / m['baseline']:.2f}"
                if a.baseline else "")
        lines.append(f"| {r['compute_ms']} | {m['memory']:.0f} | {m['chunks']:.0f} | "
                     f"{m['global']:.0f} | {r['chunks_vs_memory']:.2f} | "
                     f"{r['chunks_vs_global']:.1f}{base} |")
    table = "\n".join(lines)
    print(table)
    for r in results:
        print(f"compute {r['compute_ms']} ms: raw {json.dumps(r['rates'])}; chunks "
              f"{json.dumps(r['chunks'])}")
    if a.out:
        with open(a.out + ".md", "w") as f:
            f.write(table + "\n")
        with open(a.out + ".json", "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
