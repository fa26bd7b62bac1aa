#!/usr/bin/python3
"""Stream read-ahead (issue 38, acceptance 2): `mpistage stage --sqlite` over a query whose rows
cost about 50 µs each to produce, with a trainer that computes --compute-ms per step, read on
the training thread (`--threads 0`) beside read ahead by an I/O thread (`--prefetch 4
--threads 1`), side by side in one run, idle and with one competing busy process per core.

The per-row cost is a correlated recursive CTE (`WITH RECURSIVE c(x) ...` of K rows per result
row, deterministic, so every sharding accepts it); K is calibrated at the start with Python's
sqlite3 module to about ROW_US µs a row on this machine, and the measured cost is printed.

Accelerator utilisation = steps x compute per step / the epoch's seconds (`"epochs"[0].seconds`
and `"steps"` of --json, the slowest rank's loop): the share of the loop a GPU would be busy if
each step's compute ran there. Without read-ahead a step costs its reads (B x 50 µs) plus its
compute, so the utilisation is compute / (compute + reads); with read-ahead the next steps'
rows are read while the trainer computes.

Usage: stream_prefetch.py MPISTAGE_CLI [--runs 3] [--ranks 1,2] [--rows 4000] [--batch 20]
                          [--compute-ms 2] [--row-us 50] [--work DIR] [--contention idle,busy]
                          [--shard range:id]
Prints a Markdown table (medians of --runs, methods interleaved run by run) and writes it to
WORK/stream_prefetch.md.
"""
import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time

from contention import BusyCores

QUERY = ("SELECT id, (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
         "WHERE x < {k}) SELECT sum(x) FROM c WHERE id >= 0) AS v FROM t ORDER BY id")


def make_db(path, rows):
    if os.path.exists(path):
        os.remove(path)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v REAL)")
    db.executemany("INSERT INTO t VALUES(?, ?)", ((i, 0.0) for i in range(rows)))
    db.commit()
    db.close()


def row_us(path, k, rows=1000):
    db = sqlite3.connect(path)
    t0 = time.perf_counter()
    n = len(db.execute(QUERY.format(k=k) + f" LIMIT {rows}").fetchall())
    dt = time.perf_counter() - t0
    db.close()
    return dt / n * 1e6


def calibrate(path, target_us):
    """K with about `target_us` µs a row (the cost is linear in K)."""
    k = 100
    for _ in range(3):
        us = min(row_us(path, k) for _ in range(3))
        k = max(1, int(k * target_us / us))
    return k, min(row_us(path, k) for _ in range(3))


def run(cli, db, query, ranks, args, threads, work):
    report = os.path.join(work, f"r{ranks}-t{threads}.json")
    read = ["--threads", "0"] if threads == 0 else ["--prefetch", "4", "--threads", str(threads)]
    cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none", cli, "stage",
           "--sqlite", db, "--query", query, "--batch-size", str(args.batch),
           "--compute-ms", str(args.compute_ms), "--epochs", "1", "--quiet", "--json", report,
           "--shard", args.shard,
           *read]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(report) as f:
        r = json.load(f)
    e = r["epochs"][0]
    wait_io = max(x.get("wait_io_seconds", 0.0) for x in r["ranks"])
    return {"seconds": e["seconds"], "steps": e["steps"],
            "utilisation": e["steps"] * args.compute_ms / 1e3 / e["seconds"], "wait_io": wait_io}


def main():
    if os.geteuid() == 0:  # Open MPI refuses root without both (as scripts/test.sh sets them)
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    p = argparse.ArgumentParser()
    p.add_argument("cli")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--ranks", default="1,2")
    p.add_argument("--rows", type=int, default=4000)
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--compute-ms", type=int, default=2)
    p.add_argument("--row-us", type=float, default=50.0)
    p.add_argument("--work", default="/tmp/mpistage-stream-prefetch")
    p.add_argument("--contention", default="idle,busy")
    # chunk (the CLI's default): every rank steps through every row of the result, producing
    # the others' rows too, so at W ranks a rank's reads cost W times its own rows.
    p.add_argument("--shard", default="chunk")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    db = os.path.join(args.work, "rows.db")
    make_db(db, args.rows)
    k, us = calibrate(db, args.row_us)
    query = QUERY.format(k=k)
    lines = [f"{args.rows} rows at {us:.1f} µs a row (K = {k}, sqlite3 module, idle), batch "
             f"{args.batch} (≈ {args.batch * us / 1e3:.2f} ms of reads a step on one rank), "
             f"--compute-ms {args.compute_ms}, --shard {args.shard}; medians of {args.runs} runs, interleaved; "
             f"{os.cpu_count()} cores, load {open('/proc/loadavg').read().split()[0]} at start.",
             "",
             "| CPU | ranks | reading | epoch s | steps | utilisation | wait for rows (s, slowest rank) |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for contention in args.contention.split(","):
        for ranks in (int(x) for x in args.ranks.split(",")):
            results = {0: [], 1: []}
            for _ in range(args.runs):
                for threads in (0, 1):
                    if contention == "busy":
                        with BusyCores():
                            results[threads].append(run(args.cli, db, query, ranks, args,
                                                        threads, args.work))
                    else:
                        results[threads].append(run(args.cli, db, query, ranks, args, threads,
                                                    args.work))
            for threads, name in ((0, "training thread (`--threads 0`)"),
                                  (1, "read ahead (`--prefetch 4 --threads 1`)")):
                rs = results[threads]
                med = {key: statistics.median(r[key] for r in rs) for key in rs[0]}
                lines.append(f"| {contention} | {ranks} | {name} | {med['seconds']:.3f} | "
                             f"{med['steps']:.0f} | **{med['utilisation'] * 100:.0f} %** | "
                             f"{med['wait_io']:.3f} |")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.work, "stream_prefetch.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
