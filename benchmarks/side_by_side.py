#!/usr/bin/python3
"""Side-by-side staging benchmark (run through benchmarks/run.sh): mpistage in each tier and
shuffle, PyTorch DataLoader + h5py (naive), PyTorch in memory (expert), and the raw limits (cat
of the file, memcpy, and the copy floor of a global shuffle: one memcpy or one pread a sample
with no loader, `row_copy_floor`), on the same files in one run. Steady-state throughput is
(T(E epochs) - T(1 epoch)) / (E - 1) per epoch, with T the cumulative epoch time inside one run,
so start-up and the first (cold or staging) epoch cancel. Medians of RUNS runs after a warm-up;
the naive DataLoader + h5py baseline (about a minute per Fashion-MNIST epoch) runs
min(RUNS, NAIVE_RUNS = 3) times without a warm-up run (its first epoch is discarded by the
steady-state formula anyway).

DLIO-like emulated compute: the workloads with "compute_us" sleep that long after every step
(mpistage `--compute-us`, torch_baselines.py `--compute-us=`), as DLIO's `computation_time`
does, and report the accelerator utilisation AU = steps per rank x compute per step / steady
epoch seconds (DLIO: total compute time / total time of the epoch), in a table of their own.

Parallel-file-system model (benchmarks/README.md, "Parallel-file-system model"): with
PFS_MODEL=<path of libmpistage_pfs_model.so>, every method's processes (mpistage ranks, the
PyTorch baselines' Python ranks, `cat`) run with the shim preloaded, so each read of a file under
WORK_DIR costs MPISTAGE_PFS_LATENCY_US (default 1000) plus its bytes over MPISTAGE_PFS_BANDWIDTH
bytes/s per process (default 2e9); mpistage then also runs with 8 I/O threads
(`--threads 8`, reads in flight overlap their latency). Selection and length, for runs where a
full table would take hours: WORKLOADS=name,name (default all), MAX_EPOCHS=E (caps every
workload's epochs, >= 2), WARMUP=0 (no warm-up run).

COLD=1: before each method's first run (its warm-up; the naive baseline has none, so its first
timed run reads cold), the workload's files leave the page cache (fdatasync, then
posix_fadvise(POSIX_FADV_DONTNEED); dropped only where no process maps them), so each method
reads them in itself, as a job does on its first run, and its timed runs find them cached the
way its own reads left them: in 2 MiB folios after the mapped tier (MADV_HUGEPAGE), in the
kernel's readahead sizes after `read`s (benchmarks/README.md, "Huge pages of the page cache").
Without COLD the files stay cached as whatever read or wrote them last left them.

Usage: side_by_side.py BUILD_DIR WORK_DIR NP RUNS OUT_PREFIX
Writes OUT_PREFIX.json (every run), OUT_PREFIX.md (the table), OUT_PREFIX.dat (plot data).
ONLY=REGEX (environment) runs only the rows whose "workload | method" matches it (re.search),
e.g. ONLY='^(fmnist|resnet50)(\+compute)? \| (mpistage|cat)' for the staging rows; ratios
whose rows were not run are left out of the report.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"


PFS_MODEL = os.environ.get("PFS_MODEL", "")
PFS_VARS = ("MPISTAGE_PFS_LATENCY_US", "MPISTAGE_PFS_BANDWIDTH", "MPISTAGE_PFS_ROOT")


def pfs_env():
    """The environment of a process under the parallel-file-system model ({} without it)."""
    if not PFS_MODEL:
        return {}
    return {"LD_PRELOAD": PFS_MODEL, **{k: os.environ[k] for k in PFS_VARS if k in os.environ}}


def evict(paths):
    """Drops the page-cache pages of `paths` that no process maps (COLD=1), written back first
    (DONTNEED skips dirty pages)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def mpirun(np_, args):
    env = ["-x", "LD_LIBRARY_PATH"] if os.environ.get("LD_LIBRARY_PATH") else []
    for k, v in pfs_env().items():  # only the ranks load the shim, not mpirun itself
        env += ["-x", f"{k}={v}"]
    return ["mpirun", "-np", str(np_), "--bind-to", "none", *env] + args


NAIVE_RUNS = 3


def run_mpistage(build, np_, work, w, shuffle, stage, epochs, two_phase="off", cli=None,
                 threads=1, stage_read=None):
    """One mpistage run. `cli` replaces the built CLI by an older binary (BASELINE_MPISTAGE:
    the rate before the memory tier, which has no --stage flag and no tier in its JSON).
    `two_phase`: --two-phase off|on|auto (the result says whether it was chosen).
    `stage_read`: --stage-read map|copy (default: the CLI's auto)."""
    sharding = "global" if shuffle == "global" else "byte_range"
    # A report file of this run's own, so that runs sharing WORK never read each other's.
    fd, out = tempfile.mkstemp(prefix="side_by_side.", suffix=".json", dir=work)
    os.close(fd)
    cmd = [cli or os.path.join(build, "mpistage"), "stage", *w["files"], *w["flags"],
           "--batch-size", str(w["batch"]), "--epochs", str(epochs), "--shuffle", shuffle,
           "--sharding", sharding, "--remainder", "pad", "--threads", str(threads),
           "--prefetch", "4", "--quiet", "--json", out]
    if not cli:
        cmd += ["--stage", stage]
    if two_phase != "off":
        cmd += ["--two-phase", two_phase]
    if stage_read:
        cmd += ["--stage-read", stage_read]
    try:
        if cli:
            return run_old_cli(np_, cmd, epochs, w)
        if w.get("compute_us"):
            cmd += ["--compute-us", str(w["compute_us"])]
        subprocess.run(mpirun(np_, cmd), check=True)
        with open(out) as f:
            j = json.load(f)
    finally:
        os.unlink(out)
    ep = [e["seconds"] for e in j["epochs"]]
    if any(e["tier"] != ("memory" if stage == "memory" else "file") for e in j["epochs"]):
        raise SystemExit("unexpected tier in " + json.dumps(j["epochs"]))
    st = j["stage"]
    return {"samples": j["num_samples"], "epoch_seconds": ep,
            "load_seconds": st["stage_seconds"], "staged_bytes": st["staged_bytes"],
            "stage_read_seconds": st.get("read_seconds", 0.0),
            "stage_populate_seconds": st.get("populate_seconds", 0.0),
            "stage_map_node_seconds": st.get("map_node_seconds", 0.0),
            "stage_read_method": st.get("read_method", ""),
            "two_phase_chosen": st["two_phase"]["chosen"],
            "two_phase_note": st["two_phase"]["note"],
            "steps": max(j["epochs"][0]["batches_per_rank"])}


def run_old_cli(np_, cmd, epochs, w):
    """The older CLI reports no per-epoch seconds: T(k) is the wall time of a whole run of k
    epochs, so (T(E) - T(1)) / (E - 1) still cancels start-up (and one cold epoch)."""
    def wall(k):
        c = list(cmd)
        c[c.index("--epochs") + 1] = str(k)
        t0 = time.perf_counter()
        subprocess.run(mpirun(np_, c), check=True)
        return time.perf_counter() - t0
    t1, te = wall(1), wall(epochs)
    per = (te - t1) / (epochs - 1)
    return {"samples": w["samples"], "epoch_seconds": [t1] + [per] * (epochs - 1),
            "load_seconds": 0.0, "steps": 0}


def run_torch(np_, w, mode, epochs):
    compute = [f"--compute-us={w['compute_us']}"] if w.get("compute_us") else []
    cmd = [PY, os.path.join(HERE, "torch_baselines.py"), *compute, mode, w["files"][0],
           str(w["batch"]), str(epochs), *w["h5_fields"]]
    r = subprocess.run(mpirun(np_, cmd), check=True, capture_output=True, text=True)
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return {"samples": j["samples_per_epoch"], "epoch_seconds": j["epoch_seconds"],
            "load_seconds": j["load_seconds"], "steps": j["steps_per_epoch"]}


def run_sleep(np_, w, epochs):
    """The AU ceiling: the steps of one rank with nothing but the emulated compute (the sleep's
    own overshoot is the only loss)."""
    steps = -(-w["samples"] // (np_ * w["batch"]))
    times = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        for _ in range(steps):
            time.sleep(w["compute_us"] / 1e6)
        times.append(time.perf_counter() - t0)
    return {"samples": w["samples"], "epoch_seconds": times, "load_seconds": 0.0,
            "steps": steps}


def run_cat(w):
    path = w["files"][0]
    t0 = time.perf_counter()
    subprocess.run(["cat", path], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, **pfs_env()})
    seconds = time.perf_counter() - t0
    return {"samples": w["samples"], "epoch_seconds": [seconds, seconds],
            "bytes": os.path.getsize(path), "load_seconds": 0.0}


def run_memcpy(w):
    src = np.ones(w["samples"] * w["sample_bytes"], dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in first
    t0 = time.perf_counter()
    np.copyto(dst, src)
    seconds = time.perf_counter() - t0
    return {"samples": w["samples"], "epoch_seconds": [seconds, seconds], "load_seconds": 0.0}


def run_floor(build, np_, w, method, epochs):
    """The copy floor of a global shuffle (benchmarks/row_copy_floor.cpp): each rank copies its
    share of a shuffled epoch's rows into a ring with one memcpy from the file's mapping, or one
    pread, a sample, with no loader. The fields' file offsets come from h5py (contiguous
    datasets only)."""
    import h5py
    specs = []
    with h5py.File(w["files"][0], "r") as f:
        for name in w["h5_fields"]:
            d = f[name]
            row = d.dtype.itemsize * int(np.prod(d.shape[1:]))
            specs.append(f"{d.id.get_offset()}:{row}")
    cmd = [os.path.join(build, "benchmarks", "row_copy_floor"), w["files"][0], str(w["samples"]),
           str(w["batch"]), "4", str(epochs), method, *specs]
    r = subprocess.run(mpirun(np_, cmd), check=True, capture_output=True, text=True)
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return {"samples": w["samples"], "epoch_seconds": j["epoch_seconds"], "load_seconds": 0.0}


def steady_epoch_seconds(r):
    """(T(E) - T(1)) / (E - 1): the steady-state seconds of one epoch."""
    ep = r["epoch_seconds"]
    t_e, t_1 = sum(ep), ep[0]
    return (t_e - t_1) / (len(ep) - 1)


def steady(r):
    return r["samples"] / steady_epoch_seconds(r)


def accelerator_utilisation(r, w):
    """DLIO's AU: compute time of the steady epoch's steps over its wall time."""
    return r["steps"] * w["compute_us"] / 1e6 / steady_epoch_seconds(r)


def methods(w):
    """(name, runner) pairs for workload w."""
    m = []
    e = w["epochs"]
    if w.get("compute_us"):
        for stage in ("none", "memory"):
            m.append((f"mpistage stage={stage} shuffle=global",
                      lambda b, n, wk, s=stage: run_mpistage(b, n, wk, w, "global", s, e)))
        m.append(("torch in memory (expert)", lambda b, n, wk: run_torch(n, w, "memory", e)))
        m.append(("sleep only (AU ceiling)", lambda b, n, wk: run_sleep(n, w, e)))
        return m
    shuffles = w["shuffles"]
    for stage in ("none", "memory"):
        for sh in shuffles:
            m.append((f"mpistage stage={stage} shuffle={sh}",
                      lambda b, n, wk, s=stage, x=sh: run_mpistage(b, n, wk, w, x, s, e)))
    if w.get("h5_fields"):  # contiguous HDF5: `auto` maps; the copied tier beside it
        m.append(("mpistage stage=memory shuffle=global stage-read=copy",
                  lambda b, n, wk: run_mpistage(b, n, wk, w, "global", "memory", e,
                                                stage_read="copy")))
    if "global" in shuffles:
        m.append(("mpistage stage=none shuffle=global two-phase",
                  lambda b, n, wk: run_mpistage(b, n, wk, w, "global", "none", e, two_phase="on")))
        m.append(("mpistage stage=none shuffle=global two-phase auto",
                  lambda b, n, wk: run_mpistage(b, n, wk, w, "global", "none", e,
                                                two_phase="auto")))
    if PFS_MODEL:  # reads in flight overlap their latency
        for stage in ("none", "memory"):
            m.append((f"mpistage stage={stage} shuffle=global threads=8",
                      lambda b, n, wk, s=stage: run_mpistage(b, n, wk, w, "global", s, e,
                                                             threads=8)))
    base = os.environ.get("BASELINE_MPISTAGE")
    if base and w["name"] == "fmnist-tfrecord":
        for sh in shuffles:
            m.append((f"mpistage before the tier shuffle={sh}",
                      lambda b, n, wk, x=sh: run_mpistage(b, n, wk, w, x, "none", e, cli=base)))
    if w.get("h5_fields"):
        if not os.environ.get("SKIP_NAIVE"):
            m.append(("torch DataLoader+h5py (naive)",
                      lambda b, n, wk: run_torch(n, w, "naive", w["naive_epochs"])))
        m.append(("torch in memory (expert)", lambda b, n, wk: run_torch(n, w, "memory", e)))
    if w.get("h5_fields") and "global" in shuffles and not PFS_MODEL:  # the shim sees no loads
        for how in ("memcpy", "pread"):
            m.append((f"copy floor {how} (global order, no loader)",
                      lambda b, n, wk, x=how: run_floor(b, n, w, x, e)))
    m.append(("cat FILE (raw read limit)", lambda b, n, wk: run_cat(w)))
    m.append(("memcpy (one core)", lambda b, n, wk: run_memcpy(w)))
    return m


def workloads(work):
    """The workloads, narrowed by WORKLOADS and MAX_EPOCHS (module docstring)."""
    wls = all_workloads(work)
    names = [x for x in os.environ.get("WORKLOADS", "").split(",") if x]
    if names:
        wls = [w for w in wls if w["name"] in names]
    cap = int(os.environ.get("MAX_EPOCHS", "0"))
    if cap >= 2:
        for w in wls:
            w["epochs"] = min(w["epochs"], cap)
            if "naive_epochs" in w:
                w["naive_epochs"] = min(w["naive_epochs"], cap)
    return wls


def all_workloads(work):
    return [
        {"name": "fmnist", "files": [os.path.join(work, "fmnist.h5")],
         "flags": ["--field", "images", "--field", "labels"], "h5_fields": ["images", "labels"],
         "batch": 64, "epochs": 21, "naive_epochs": 2, "samples": 60000, "sample_bytes": 785,
         "shuffles": ["none", "local", "global"]},
        {"name": "fmnist-tfrecord", "files": [os.path.join(work, "fmnist.tfrecord")],
         "flags": ["--feature", "image:bytes/uint8:28x28", "--feature", "label:int64"],
         "batch": 64, "epochs": 11, "samples": 60000, "sample_bytes": 792,
         "shuffles": ["none", "global"]},
        {"name": "resnet50", "files": [os.path.join(work, "resnet50.h5")],
         "flags": ["--field", "images", "--field", "labels"], "h5_fields": ["images", "labels"],
         "batch": 16, "epochs": 6, "naive_epochs": 2, "samples": 2000,
         "sample_bytes": 224 * 224 * 3 + 8, "shuffles": ["none", "global"]},
    ] + compute_workloads(work)


def compute_workloads(work):
    """DLIO-like emulated compute per step (benchmarks/README.md, "DLIO-like emulated compute")."""
    fm = os.path.join(work, "fmnist.h5")
    rn = os.path.join(work, "resnet50.h5")
    fields = ["--field", "images", "--field", "labels"]
    return [
        {"name": "fmnist+compute", "files": [fm], "flags": fields,
         "h5_fields": ["images", "labels"], "batch": 64, "epochs": 6, "samples": 60000,
         "sample_bytes": 785, "compute_us": 1000},
        {"name": "resnet50+compute", "files": [rn], "flags": fields,
         "h5_fields": ["images", "labels"], "batch": 16, "epochs": 3, "samples": 2000,
         "sample_bytes": 224 * 224 * 3 + 8, "compute_us": 25750},
    ]


def main():
    build, work, np_, runs, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
        sys.argv[5]
    if PFS_MODEL:
        os.environ.setdefault("MPISTAGE_PFS_ROOT", os.path.abspath(work))
    warmup = 0 if os.environ.get("WARMUP") == "0" else 1
    cold = os.environ.get("COLD") == "1"
    results = {}
    only = re.compile(os.environ.get("ONLY", ""))
    for w in workloads(work):
        for name, fn in methods(w):
            key = w["name"] + " | " + name
            if not only.search(key):
                continue
            results[key] = []
            naive = "naive" in name
            first = 0 if naive else warmup  # run 0 is the warm-up (none for the naive one)
            if cold:
                evict(w["files"])
            t0 = time.perf_counter()
            for i in range(min(runs, NAIVE_RUNS) if naive else runs + first):
                r = fn(build, np_, work)
                if i >= first:
                    results[key].append(r)
            spent = time.perf_counter() - t0
            sps = statistics.median(steady(r) for r in results[key])
            print(f"{key:70s} {sps / 1e6:10.3f} M samples/s  ({spent:.0f} s, warm-up included)",
                  flush=True)
    with open(out + ".json", "w") as f:
        json.dump(results, f, indent=1)
    report(results, workloads(work), out)


def report(results, wls, out):
    med = {k: statistics.median(steady(r) for r in v) for k, v in results.items()}
    first = {k: statistics.median(r["epoch_seconds"][0] + r["load_seconds"] for r in v)
             for k, v in results.items()}
    lines = ["| workload | method | steady samples/s | MB/s | epoch 1 s (incl. load/stage) |",
             "|---|---|---:|---:|---:|"]
    dat = []
    for w in [w for w in wls if not w.get("compute_us")]:
        for k in [k for k in med if k.startswith(w["name"] + " | ")]:
            method = k.split(" | ", 1)[1]
            lines.append(f"| {w['name']} | {method} | {med[k]:,.0f} | "
                         f"{med[k] * w['sample_bytes'] / 1e6:,.1f} | {first[k]:.3f} |")
            label = method.replace("mpistage stage=", "mpistage ").replace(" shuffle=", "/")
            dat.append(f"\"{w['name']}: {label.split(' (')[0]}\" {med[k]:.1f}")
    lines += ["", "Ratios (medians):", ""]
    f = "fmnist | "

    def ratio(a, b):
        return med[f + a] / med[f + b] if f + a in med and f + b in med else float("nan")

    g = "mpistage stage=memory shuffle=global"
    lines.append(f"- fmnist staged global / torch in memory: {ratio(g, 'torch in memory (expert)'):.2f}x"
                 " (target >= 3)")
    lines.append(f"- fmnist staged global / torch DataLoader+h5py: "
                 f"{ratio(g, 'torch DataLoader+h5py (naive)'):.1f}x (target >= 100)")
    lines.append(f"- fmnist staged global / unstaged shuffle none: "
                 f"{ratio(g, 'mpistage stage=none shuffle=none'):.2f} (target >= 0.67)")
    lines.append(f"- fmnist staged global / unstaged global: "
                 f"{ratio(g, 'mpistage stage=none shuffle=global'):.2f}x")
    t = "fmnist-tfrecord | mpistage "
    for sh in ("none", "global"):
        a, b = t + "stage=memory shuffle=" + sh, t + "stage=none shuffle=" + sh
        if a not in med or b not in med:  # the workload was not selected (WORKLOADS)
            continue
        lines.append(f"- tfrecord staged / unstaged (this build), shuffle {sh}: {med[a] / med[b]:.2f}x")
        old = t + "before the tier shuffle=" + sh
        if old in med:
            lines.append(f"- tfrecord staged / the rate before the tier (BASELINE_MPISTAGE), "
                         f"shuffle {sh}: {med[a] / med[old]:.2f}x (target >= 3)")
    lines += staging_lines(results, med)
    lines += floor_lines(med, wls)
    lines += two_phase_lines(results, med, wls)
    lines += pfs_ratios(results, med)
    lines += compute_table(results, wls)
    with open(out + ".md", "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(out + ".dat", "w") as fh:
        fh.write("\n".join(dat) + "\n")
    print("\n".join(lines))


def whole_run_rate(runs):
    """Samples of all epochs of a run over its whole time, load (staging read or PyTorch's full
    read) included; the median over runs."""
    return statistics.median(r["samples"] * len(r["epoch_seconds"]) /
                             (r["load_seconds"] + sum(r["epoch_seconds"])) for r in runs)


def two_phase_lines(results, med, wls):
    """Issue 21: per workload, two-phase on and auto against the plain global shuffle, with
    what auto chose in each run (auto must reach >= 0.8 x plain, or not choose two-phase)."""
    lines = []
    for w in wls:
        plain = w["name"] + " | mpistage stage=none shuffle=global"
        on, auto = plain + " two-phase", plain + " two-phase auto"
        if plain not in med or (on not in med and auto not in med):
            continue
        parts = []
        if on in med:
            parts.append(f"on / plain {med[on] / med[plain]:.2f}x")
        if auto in med:
            chose = ", ".join("on" if r["two_phase_chosen"] else "off" for r in results[auto])
            parts.append(f"auto / plain {med[auto] / med[plain]:.2f}x (auto chose: {chose})")
        lines.append(f"- {w['name']} two-phase: " + "; ".join(parts))
    return lines


def pfs_ratios(results, med):
    """Acceptance 3's second half (issue 21), under the parallel-file-system model: the best
    mpistage mode against PyTorch DataLoader + h5py and against PyTorch in memory including its
    load, for Fashion-MNIST."""
    if not PFS_MODEL:
        return []
    f = "fmnist | "
    ours = {k: v for k, v in med.items() if k.startswith(f + "mpistage ")}
    naive, memory = f + "torch DataLoader+h5py (naive)", f + "torch in memory (expert)"
    if not ours or naive not in med or memory not in med:
        return []
    best = max(ours, key=ours.get)
    best_run = max(ours, key=lambda k: whole_run_rate(results[k]))
    e = len(results[best_run][0]["epoch_seconds"])
    whole = whole_run_rate(results[best_run]) / whole_run_rate(results[memory])

    def first_epoch(k):
        return statistics.median(r["epoch_seconds"][0] + r["load_seconds"] for r in results[k])

    lat = os.environ.get("MPISTAGE_PFS_LATENCY_US", "1000")
    bw = float(os.environ.get("MPISTAGE_PFS_BANDWIDTH", "2e9"))
    return ["", f"Under the parallel-file-system model ({lat} us per request, {bw / 1e9:g} GB/s "
            "per process):", "",
            f"- best mpistage mode by steady rate ({best.split(' | ')[1]}) / torch "
            f"DataLoader+h5py: {med[best] / med[naive]:.1f}x (target >= 10)",
            f"- best mpistage mode by steady rate / torch in memory (steady, load excluded): "
            f"{med[best] / med[memory]:.2f}x",
            f"- best mpistage mode over a whole {e}-epoch run, staging included "
            f"({best_run.split(' | ')[1]}) / torch in memory over a whole {e}-epoch run, its "
            f"load included: {whole:.2f}x (target >= 3)",
            f"- first epoch incl. load (median): best mpistage {first_epoch(best_run):.3f} s, "
            f"torch in memory {first_epoch(memory):.3f} s"]


def staging_lines(results, med):
    """Issue 21, acceptance 1 and 2: the staging read against an unstaged in-order epoch and
    the cat rate; the staged global shuffle's second epoch against its steady epoch; staged
    global steady against unstaged global (medians over runs)."""
    lines = ["", "Staging read and warm-up (issue 21; medians; stage = the whole staging: "
             "read + page mapping):", "",
             "| workload | stage s | of which read / map own / map node s | read method | "
             "stage MB/s | cat MB/s | stage / unstaged in-order epoch (first; steady) | "
             "stage rate / cat rate | staged global: epoch 2 / steady | staged / unstaged "
             "global steady |", "|---|---:|---|---|---:|---:|---|---:|---:|---:|"]
    for wl, k in [(wl, wl + " | mpistage stage=memory shuffle=global" + variant)
                  for wl in ("fmnist", "resnet50") for variant in ("", " stage-read=copy")]:
        if k not in results:
            continue
        rs = results[k]

        def m(key):
            return statistics.median(r[key] for r in rs)

        stage, nbytes = m("load_seconds"), m("staged_bytes")
        parts = f"{m('stage_read_seconds'):.3f} / {m('stage_populate_seconds'):.3f} / " \
                f"{m('stage_map_node_seconds'):.3f}"
        rate = nbytes / stage if stage > 0 else float("nan")
        ino = results.get(wl + " | mpistage stage=none shuffle=none")
        ino_txt = "n/a"
        if ino:
            e1 = statistics.median(r["epoch_seconds"][0] for r in ino)
            es = statistics.median(steady_epoch_seconds(r) for r in ino)
            ino_txt = f"{stage / e1:.2f} ({e1:.3f} s); {stage / es:.2f} ({es:.3f} s)"
        cat = results.get(wl + " | cat FILE (raw read limit)")
        cat_rate = statistics.median(r["bytes"] / r["epoch_seconds"][0] for r in cat) \
            if cat else float("nan")
        warm = statistics.median(r["epoch_seconds"][1] / steady_epoch_seconds(r) for r in rs)
        ug = wl + " | mpistage stage=none shuffle=global"
        vs = f"{med[k] / med[ug]:.2f}" if ug in med else "n/a"
        lines.append(f"| {k.split(' | ')[0]}{' (copy)' if 'copy' in k else ''} | {stage:.3f} | {parts} | {rs[0]['stage_read_method']} | "
                     f"{rate / 1e6:,.0f} | {cat_rate / 1e6:,.0f} | {ino_txt} | "
                     f"{rate / cat_rate:.2f} | {warm:.2f} | {vs} |")
    return lines


def floor_lines(med, wls):
    """Each global shuffle against its copy floor (run_floor, a bare copy loop: a reference
    rate, not a strict bound): how close the staged and the unstaged epochs come to one memcpy
    or one pread a sample, and what staged / unstaged global comes to when the staged epoch
    runs at the memcpy loop's rate (a staged epoch still copies every sample once)."""
    lines = []
    for w in wls:
        n = w["name"] + " | "
        staged, unstaged = n + "mpistage stage=memory shuffle=global", \
            n + "mpistage stage=none shuffle=global"
        mem, pre = n + "copy floor memcpy (global order, no loader)", \
            n + "copy floor pread (global order, no loader)"
        if not all(k in med for k in (staged, unstaged, mem, pre)):
            continue
        lines.append(f"- {w['name']} against the copy floor: staged global / memcpy floor "
                     f"{med[staged] / med[mem]:.2f}; unstaged global / pread floor "
                     f"{med[unstaged] / med[pre]:.2f}; pread floor / memcpy floor "
                     f"{med[pre] / med[mem]:.2f}; memcpy floor / unstaged global "
                     f"{med[mem] / med[unstaged]:.2f}")
    return ["", "Copy floor (one memcpy or one pread a sample, no loader):", ""] + lines \
        if lines else []


def compute_table(results, wls):
    """AU table of the DLIO-like workloads (medians over runs)."""
    lines = ["", "DLIO-like emulated compute (a sleep per step; AU = steps x compute / steady "
             "epoch seconds):", "",
             "| workload | compute per step | method | steady samples/s | steady epoch s | AU % |",
             "|---|---:|---|---:|---:|---:|"]
    for w in [w for w in wls if w.get("compute_us")]:
        for k in [k for k in results if k.startswith(w["name"] + " | ")]:
            rs = results[k]
            sps = statistics.median(steady(r) for r in rs)
            ep = statistics.median(steady_epoch_seconds(r) for r in rs)
            au = statistics.median(accelerator_utilisation(r, w) for r in rs)
            lines.append(f"| {w['name']} | {w['compute_us'] / 1000:g} ms | {k.split(' | ', 1)[1]} "
                         f"| {sps:,.0f} | {ep:.3f} | {100 * au:.1f} |")
    return lines


if __name__ == "__main__":
    main()
