#!/usr/bin/env python3
"""SQLite stream read rate: `mpistage stage --sqlite` at 1, 2 and 4 ranks against the `sqlite3`
shell running the same query, on the same database of 10^6 two-column rows, side by side.

Usage: bench_sqlite.py MPISTAGE_CLI [--runs N] [--rows N] [--work DIR] [--ranks 1,2,4]
                       [--baseline OTHER_CLI] [--sessions job,rank]
                       [--shards chunk,range:id,hash:id]

Rates are rows/s, medians of N runs (after one warm-up run of each method, warm page cache;
methods interleaved run by run, so load changes hit every method alike):
  shell      `sqlite3 -batch DB QUERY > /dev/null`: wall time of the process (it prints every
             row as text, the cheapest complete read a user has at hand), and its CPU seconds
  mpistage   `--shard chunk` (every rank steps through the result, reads its own chunks) and
             `--shard range:id` (64 key ranges of the INTEGER PRIMARY KEY pushed into the SQL,
             whole ranges to ranks: each rank reads only its rows); the epoch's seconds of the
             slowest rank (`"epochs"[0].seconds` of --json: opening, the snapshot agreement and
             the row count are outside), the CPU seconds of the busiest rank in that loop
             (`"ranks"[r].cpu_seconds`), and the whole `mpirun` wall time (MPI start-up
             included) and the CPU seconds of the busiest rank's whole process (/usr/bin/time)
  sessions   `job`: every rank in the session of mpirun (the usual launch); `rank`: each rank
             started by `setsid -w` in a session of its own. Linux's autogroup scheduler
             (/proc/sys/kernel/sched_autogroup_enabled) shares the CPU fairly between
             sessions, so on a machine busy with other sessions a whole job gets one session's
             share however many ranks it has, and wall time cannot scale with ranks; with a
             session per rank each rank gets the share a 1-rank run gets (as a core per rank
             would on a cluster). On an idle machine the two are the same.
  CPU rate   rows / CPU seconds of the busiest rank's loop (shell: of the process): what the
             rate would be with a core per rank, whatever the load; labelled as such.
With --baseline the same runs are made with another build of the CLI (e.g. the one before a
change), labelled "baseline". Prints a Markdown table and writes it to WORK/bench_sqlite.md.
"""
import argparse
import json
import os
import re
import resource
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


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd):
    """Wall seconds, CPU seconds of the (waited-for) children, stderr."""
    c0 = children_cpu()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    return time.perf_counter() - t0, children_cpu() - c0, p.stderr


def loadavg():
    return float(open("/proc/loadavg").read().split()[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cli")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rows", type=int, default=1000000)
    ap.add_argument("--work", default="bench_sqlite_work")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--chunk-rows", type=int, default=8192)
    ap.add_argument("--baseline", default="", help="another mpistage CLI, run the same way")
    ap.add_argument("--sessions", default="job,rank", help="job, rank or both (see above)")
    ap.add_argument("--shards", default="chunk,range:id,hash:id",
                    help="the --shard values to run, comma-separated")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    db = os.path.join(a.work, "rows.db")
    make_db(db, a.rows)
    query = "SELECT id, v FROM t"
    report = os.path.join(a.work, "report.json")
    cpu_log = os.path.join(a.work, "cpu.txt")
    mpirun = os.environ.get("MPIEXEC", "mpirun")
    builds = [("", a.cli)] + ([("baseline ", a.baseline)] if a.baseline else [])

    def shell():
        wall, cpu, _ = timed(["sqlite3", "-batch", db, query])
        return wall, cpu

    def stage(cli, np_, shard, session):
        # /usr/bin/time per rank: the CPU seconds (user + system) of each rank's process,
        # appended to one file (one write per rank).
        if os.path.exists(cpu_log):
            os.remove(cpu_log)
        own = ["setsid", "-w"] if session == "rank" else []
        wall, _, err = timed([mpirun, "-np", str(np_), "--oversubscribe", "--bind-to", "none"]
                             + own + ["/usr/bin/time", "-a", "-o", cpu_log, "-f", "cpu %U %S",
                                      cli, "stage", "--sqlite", db, "--query", query, "--quiet",
                                      "--json", report, "--batch-size", str(a.batch_size),
                                      "--chunk-rows", str(a.chunk_rows), "--shard", shard])
        r = json.load(open(report))
        assert r["epochs"][0]["valid_samples"] == a.rows, r["epochs"][0]
        text = open(cpu_log).read()
        cpu = [float(u) + float(s) for u, s in re.findall(r"cpu ([0-9.]+) ([0-9.]+)", text)]
        assert len(cpu) == np_, (text, err)
        loop_cpu = [x.get("cpu_seconds") for x in r["ranks"]]
        loop = max(loop_cpu) if None not in loop_cpu else float("nan")
        return r["epochs"][0]["seconds"], loop, wall, max(cpu)

    ranks = [int(x) for x in a.ranks.split(",")]
    shards = a.shards.split(",")
    sessions = a.sessions.split(",")
    runs = [(b, s, n, e) for b in builds for e in sessions for s in shards for n in ranks]
    load = [loadavg()]
    t_start = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    shell()  # warm-up
    for b, s, n, e in runs:
        stage(b[1], n, s, e)
    shell_wall, shell_cpu = [], []
    res = {k: [] for k in runs}
    for _ in range(a.runs):
        w, c = shell()
        shell_wall.append(w)
        shell_cpu.append(c)
        for k in runs:
            res[k].append(stage(k[0][1], k[2], k[1], k[3]))
        load.append(loadavg())
    t_end = time.strftime("%H:%M:%S UTC", time.gmtime())
    med = statistics.median
    rate = lambda xs: a.rows / med(xs)
    base_wall, base_cpu = rate(shell_wall), rate(shell_cpu)
    lines = [
        "%d rows, %s, %d runs each (medians), %s to %s; load average (1 min) at the start and "
        "after each round: %s"
        % (a.rows, query, a.runs, t_start, t_end, ", ".join("%.1f" % x for x in load)),
        "",
        "| build | ranks' sessions | method | ranks | rows/s (wall) | × shell | × 1 rank "
        "| rows/s per busiest rank's CPU s | × shell (CPU) | × 1 rank (CPU) "
        "| busiest rank's loop CPU s | rows/s incl. mpirun | busiest process CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        "| | | `sqlite3` shell | 1 | %.0f | 1.00 | | %.0f | 1.00 | | %.2f | | %.2f |"
        % (base_wall, base_cpu, med(shell_cpu), med(shell_cpu)),
    ]
    for k in runs:
        b, s, n, e = k
        epoch = [x[0] for x in res[k]]
        loop = [x[1] for x in res[k]]
        one = (b, s, ranks[0], e)
        r = rate(epoch)
        r1 = rate([x[0] for x in res[one]])
        c = a.rows / med(loop)
        c1 = a.rows / med([x[1] for x in res[one]])
        lines.append("| %s| %s | `--shard %s` | %d | %.0f | %.2f | %.2f | %.0f | %.2f | %.2f "
                     "| %.3f | %.0f | %.2f |"
                     % (b[0] or "this ", e, s, n, r, r / base_wall, r / r1, c, c / base_cpu,
                        c / c1, med(loop), rate([x[2] for x in res[k]]),
                        med([x[3] for x in res[k]])))
    text = "\n".join(lines)
    print(text)
    print("raw: shell wall %s cpu %s" % (shell_wall, shell_cpu))
    for k in runs:
        print("raw: %s%s %s np%d (epoch s, loop CPU s, mpirun s, process CPU s): %s"
              % (k[0][0], k[3], k[1], k[2], res[k]))
    with open(os.path.join(a.work, "bench_sqlite.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
