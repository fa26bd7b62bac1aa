#!/usr/bin/env python3
"""SQLite stream read rate: `mpistage stage --sqlite` at 1, 2 and 4 ranks against the `sqlite3`
shell running the same query, on the same database of 10^6 two-column rows, side by side.

Usage: bench_sqlite.py MPISTAGE_CLI [--runs N] [--rows N] [--work DIR] [--ranks 1,2,4]

Rates are rows/s, medians of N runs (after one warm-up run of each method, warm page cache):
  shell      `sqlite3 -batch DB QUERY > /dev/null`, wall time of the process (it prints every
             row as text, the cheapest complete read a user has at hand)
  mpistage   `--shard chunk` (every rank steps through the result, reads its own chunks) and
             `--shard range:id` (64 key ranges of the INTEGER PRIMARY KEY pushed into the SQL,
             whole ranges to ranks: each rank reads only its rows); the epoch's seconds of the slowest rank (`"epochs"[0].seconds` of --json: opening,
             the snapshot agreement and the row count are outside), and the whole `mpirun`
             wall time (start-up of MPI included) and the CPU seconds of the busiest rank's
             process (MPI start-up, opening and counting included) beside it
Prints a Markdown table and writes it to WORK/bench_sqlite.md.
"""
import argparse
import json
import os
import re
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
    p = subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    return time.perf_counter() - t0, p.stderr


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
    cpu_log = os.path.join(a.work, "cpu.txt")
    mpirun = os.environ.get("MPIEXEC", "mpirun")

    def shell():
        return timed(["sqlite3", "-batch", db, query])[0]

    def stage(np_, shard):
        # /usr/bin/time per rank: the CPU seconds (user + system) of each rank's process,
        # appended to one file (one write per rank).
        if os.path.exists(cpu_log):
            os.remove(cpu_log)
        wall, err = timed([mpirun, "-np", str(np_), "--oversubscribe", "--bind-to", "none",
                      "/usr/bin/time", "-a", "-o", cpu_log, "-f", "cpu %U %S", a.cli,
                      "stage", "--sqlite", db, "--query", query, "--quiet", "--json", report,
                      "--batch-size", str(a.batch_size), "--chunk-rows", str(a.chunk_rows),
                      "--shard", shard])
        r = json.load(open(report))
        assert r["epochs"][0]["valid_samples"] == a.rows, r["epochs"][0]
        text = open(cpu_log).read()
        cpu = [float(u) + float(s) for u, s in re.findall(r"cpu ([0-9.]+) ([0-9.]+)", text)]
        assert len(cpu) == np_, (text, err)
        return r["epochs"][0]["seconds"], wall, max(cpu)

    ranks = [int(x) for x in a.ranks.split(",")]
    shards = ["chunk", "range:id"]
    runs = [(s, n) for s in shards for n in ranks]
    shell()  # warm-up
    for s, n in runs:
        stage(n, s)
    shell_s, epoch_s, wall_s = [], {k: [] for k in runs}, {k: [] for k in runs}
    cpu_s = {k: [] for k in runs}
    for _ in range(a.runs):  # interleaved, so load changes hit every method alike
        shell_s.append(shell())
        for s, n in runs:
            e, w, c = stage(n, s)
            epoch_s[(s, n)].append(e)
            wall_s[(s, n)].append(w)
            cpu_s[(s, n)].append(c)
    rate = lambda s: a.rows / statistics.median(s)
    base = rate(shell_s)
    lines = [
        "| method | ranks | rows/s (median of %d) | × sqlite3 shell | × 1 rank | rows/s incl. mpirun start-up | CPU s of the busiest rank (whole process) |" % a.runs,
        "|---|---|---|---|---|---|---|",
        "| `sqlite3` shell | 1 | %.0f | 1.00 | | | |" % base,
    ]
    for s, n in runs:
        r = rate(epoch_s[(s, n)])
        one = rate(epoch_s[(s, ranks[0])])
        lines.append("| mpistage `--shard %s` | %d | %.0f | %.2f | %.2f | %.0f | %.2f |"
                     % (s, n, r, r / base, r / one, rate(wall_s[(s, n)]),
                        statistics.median(cpu_s[(s, n)])))
    text = "\n".join(lines)
    print(text)
    print("raw seconds: shell %s; epochs %s; walls %s; cpu %s"
          % (shell_s, epoch_s, wall_s, cpu_s))
    with open(os.path.join(a.work, "bench_sqlite.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
