#!/usr/bin/env python3
"""Runs a command and writes its peak resident set size (getrusage ru_maxrss of the child, KiB)
to $PEAK_RSS_DIR/rank<R>.kib, R from the launcher's rank variable (naming only). Used under
mpirun by benchmarks/memory_rss.sh: `mpirun -np 2 peak_rss.py mpistage stage ...`."""
import os
import sys

if len(sys.argv) < 2:
    sys.exit("usage: peak_rss.py COMMAND [ARGS...]")
rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0"))
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
out = os.environ.get("PEAK_RSS_DIR")
if out:
    with open(os.path.join(out, f"rank{rank}.kib"), "w") as f:
        f.write(f"{usage.ru_maxrss}\n")
sys.exit(os.waitstatus_to_exitcode(status))
