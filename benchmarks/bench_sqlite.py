#!/usr/bin/env python3
"""SQLite stream read rate: `mpistage stage --sqlite` at 1, 2 and 4 ranks against the `sqlite3`
shell running the same query, on the same database of 10^6 two-column rows, side by side.

Usage: bench_sqlite.py MPISTAGE_CLI [--runs N] [--rows N] [--work DIR] [--ranks 1,2,4]

Rates are rows/s, medians of N runs (after one warm-up run of each method, warm page cache):
  shell      `sqlite3 -batch DB QUERY > /dev/null`, wall time of the process (it prints every
             row as text, the cheapest complete read a user has at hand)
  mpistage   the epoch's seconds of the slowest rank (`"epochs"[0].seconds` of --json: opening,
             the snapshot agreement and the row count are outside), and the whole `mpirun`
             wall time (start-up of MPI included) beside it
Prints a Markdown table and writes it to WORK/bench_sqlite.md.
"""
import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time


def make_db(path, rows):
    if os.path.exists(path):
        db = sqlite3.connect(path)
        have = db.execute("SELECT count(*) FROM t").fetchone()[0]
        db.close()
        if have == rows:
            return
        os.remove(path)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v REAL)")
    db.executemany("INSERT INTO t VALUES(?, ?)", ((i, i * 0.5) for i in range(rows)))
    db.commit()
    db.close()


def timed(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cli")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rows", type=int, default=1000000)
    ap.add_argument("--work", default="bench_sqlite_work")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--chunk-rows", type=int, default=8192)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    db = os.path.join(a.work, "rows.db")
    make_db(db, a.rows)
    query = "SELECT id, v FROM t"
    report = os.path.join(a.work, "report.json")
    mpirun = os.environ.get("MPIEXEC", "mpirun")

    def shell():
        return timed(["sqlite3", "-batch", db, query])

    def stage(np_):
        wall = timed([mpirun, "-np", str(np_), "--oversubscribe", "--bind-to", "none", a.cli,
                      "stage", "--sqlite", db, "--query", query, "--quiet", "--json", report,
                      "--batch-size", str(a.batch_size), "--chunk-rows", str(a.chunk_rows)])
        r = json.load(open(report))
        assert r["epochs"][0]["valid_samples"] == a.rows, r["epochs"][0]
        return r["epochs"][0]["seconds"], wall

    ranks = [int(x) for x in a.ranks.split(",")]
    shell()  # warm-up
    for np_ in ranks:
        stage(np_)
    shell_s, epoch_s, wall_s = [], {n: [] for n in ranks}, {n: [] for n in ranks}
    for _ in range(a.runs):  # interleaved, so load changes hit every method alike
        shell_s.append(shell())
        for np_ in ranks:
            e, w = stage(np_)
            epoch_s[np_].append(e)
            wall_s[np_].append(w)
    rate = lambda s: a.rows / statistics.median(s)
    base = rate(shell_s)
    one = rate(epoch_s[ranks[0]])
    lines = [
        "| method | ranks | rows/s (median of %d) | × sqlite3 shell | × 1 rank | rows/s incl. mpirun start-up |" % a.runs,
        "|---|---|---|---|---|---|",
        "| `sqlite3` shell | 1 | %.0f | 1.00 | | |" % base,
    ]
    for np_ in ranks:
        r = rate(epoch_s[np_])
        lines.append("| mpistage chunk | %d | %.0f | %.2f | %.2f | %.0f |"
                     % (np_, r, r / base, r / one, rate(wall_s[np_])))
    text = "\n".join(lines)
    print(text)
    print("raw seconds: shell %s; epochs %s; walls %s" % (shell_s, epoch_s, wall_s))
    with open(os.path.join(a.work, "bench_sqlite.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
