#!/usr/bin/python3
"""`mpistage stage --two-phase off|on|auto` side by side on one file (issue 21: two-phase reads
reach >= 0.8 x the plain global shuffle, or `auto` does not choose them).

Each mode runs RUNS times (in turn: off, on, auto, off, on, auto, ...) with a global shuffle
(`--sharding global --shuffle global --stage none`); the rate of a run is the valid samples of
all ranks over the slowest rank's seconds summed over the epochs after the first (E >= 2), or,
with --stop-after-steps (one partial epoch, for slow models such as the parallel-file-system
shim), over that epoch's seconds. Medians per mode; auto's decision and its note (the measured
costs and both predicted step times) are printed for every run.

Usage: two_phase_modes.py MPISTAGE_CLI FILE NP RUNS [--epochs E] [--stop-after-steps K]
                          [--pfs LIBPFS.so] [-- extra stage flags]
With --pfs the ranks run with the shim preloaded (MPISTAGE_PFS_* from the environment; the
root defaults to the file's directory).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(cli, path, np_, mode, epochs, stop, pfs, extra, work):
    out = os.path.join(work, f"{mode}.json")
    env = []
    if pfs:
        env = ["-x", f"LD_PRELOAD={pfs}", "-x",
               "MPISTAGE_PFS_ROOT=" + os.environ.get("MPISTAGE_PFS_ROOT",
                                                     os.path.dirname(os.path.abspath(path)))]
        env += [a for k in ("MPISTAGE_PFS_LATENCY_US", "MPISTAGE_PFS_BANDWIDTH")
                if k in os.environ for a in ("-x", k)]
    cmd = ["mpirun", "-np", str(np_), "--bind-to", "none", *env, cli, "stage", path,
           "--sharding", "global", "--shuffle", "global", "--stage", "none", "--remainder", "pad",
           "--threads", "1", "--prefetch", "4", "--epochs", str(epochs), "--two-phase", mode,
           "--quiet", "--json", out, *extra]
    if stop:
        cmd += ["--stop-after-steps", str(stop)]
    subprocess.run(cmd, check=True)
    with open(out) as f:
        j = json.load(f)
    eps = j["epochs"] if stop else j["epochs"][1:]
    samples = sum(e["valid_samples"] for e in eps)
    seconds = sum(e["seconds"] for e in eps)
    return {"rate": samples / seconds, "chosen": j["stage"]["two_phase"]["chosen"],
            "note": j["stage"]["two_phase"]["note"]}


def main():
    args = sys.argv[1:]
    extra = []
    if "--" in args:
        extra = args[args.index("--") + 1:]
        args = args[:args.index("--")]
    cli, path, np_, runs = args[0], args[1], int(args[2]), int(args[3])
    opts = dict(zip(args[4::2], args[5::2]))
    epochs = int(opts.get("--epochs", "3"))
    stop = int(opts.get("--stop-after-steps", "0"))
    pfs = opts.get("--pfs", "")
    if not stop and epochs < 2:
        raise SystemExit("two_phase_modes.py: --epochs >= 2 (or --stop-after-steps)")
    res = {m: [] for m in ("off", "on", "auto")}
    with tempfile.TemporaryDirectory() as work:
        for _ in range(runs):
            for m in res:
                r = run(cli, path, np_, m, 1 if stop else epochs, stop, pfs, extra, work)
                res[m].append(r)
                print(f"{m:4s} {r['rate']:12,.0f} samples/s" +
                      (f"  {r['note']}" if m == "auto" else ""), flush=True)
    med = {m: statistics.median(r["rate"] for r in v) for m, v in res.items()}
    print(f"\n| mode | median samples/s | / off | runs | auto chose |")
    print("|---|---:|---:|---:|---|")
    for m, v in res.items():
        chose = ", ".join("on" if r["chosen"] else "off" for r in v) if m == "auto" else ""
        print(f"| {m} | {med[m]:,.0f} | {med[m] / med['off']:.2f} | {len(v)} | {chose} |")


if __name__ == "__main__":
    main()
