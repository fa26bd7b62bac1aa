#!/usr/bin/env bash
# The parallel-file-system model (benchmarks/pfs/pfs_model.c) adds what it says: N preads take
# at least N x latency, a capped link at least bytes / bandwidth, files outside
# MPISTAGE_PFS_ROOT and runs with MPISTAGE_PFS_OFF=1 nothing of it, its statistics count every
# request, and it applies to a Python process as well (the PyTorch baselines).
# Usage: pfs_model_check.sh SHIM PROBE WORK_DIR [PYTHON]
set -euo pipefail
shim="$1" probe="$2" work="$3" py="${4:-/usr/bin/python3}"
rm -rf "$work" && mkdir -p "$work/data" "$work/other"
head -c 4000000 /dev/zero > "$work/data/f.bin"
cp "$work/data/f.bin" "$work/other/f.bin"
fail() { echo "FAIL: $*" >&2; exit 1; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }
model() { env LD_PRELOAD="$shim" MPISTAGE_PFS_ROOT="$work/data" "$@"; }

# 100 preads of 4 KiB at 2 ms each: >= 0.2 s (the bandwidth part is 4 KiB / 2 GB/s, 2 us).
t=$(model MPISTAGE_PFS_LATENCY_US=2000 MPISTAGE_PFS_STATS="$work/stats" \
    "$probe" "$work/data/f.bin" 100 4096)
ge "$t" 0.2 || fail "100 preads took $t s under 2 ms latency (expected >= 0.2 s)"
read -r _ requests bytes modelled _ < "$work/stats"
[ "$requests" -eq 100 ] || fail "stats counted $requests requests, expected 100"
[ "$bytes" -eq 409600 ] || fail "stats counted $bytes bytes, expected 409600"
ge "$modelled" 0.2 || fail "stats modelled $modelled s, expected >= 0.2"
echo "latency: 100 preads x 2 ms -> $t s"

# Bandwidth alone: 8 reads of 1 MB through a 40 MB/s link: >= 0.2 s.
t=$(model MPISTAGE_PFS_LATENCY_US=0 MPISTAGE_PFS_BANDWIDTH=40e6 \
    "$probe" "$work/data/f.bin" 8 1000000)
ge "$t" 0.2 || fail "8 MB at 40 MB/s took $t s (expected >= 0.2 s)"
echo "bandwidth: 8 MB at 40 MB/s -> $t s"

# Threads: the latency of requests in flight overlaps (4 threads x 25 preads at 20 ms take
# about 0.5 s, not 2 s), while one link per process carries all their bytes (4 threads x 2 MB
# at 40 MB/s take >= 0.2 s, as one thread would).
t=$(model MPISTAGE_PFS_LATENCY_US=20000 MPISTAGE_PFS_BANDWIDTH=0 \
    "$probe" "$work/data/f.bin" 25 4096 4)
ge "$t" 0.5 || fail "4 threads x 25 preads at 20 ms took $t s (expected >= 0.5 s)"
ge 1.5 "$t" || fail "4 threads x 25 preads at 20 ms took $t s: latency not overlapped (2 s)"
t=$(model MPISTAGE_PFS_LATENCY_US=0 MPISTAGE_PFS_BANDWIDTH=40e6 \
    "$probe" "$work/data/f.bin" 2 1000000 4)
ge "$t" 0.2 || fail "4 threads x 2 MB at 40 MB/s took $t s (expected >= 0.2 s: one link)"
echo "threads: latency overlapped, one link per process"

# Outside the root, and with the model off: no delay (100 x 2 ms would be 0.2 s).
for run in "other" "off"; do
    if [ "$run" = other ]; then
        t=$(model MPISTAGE_PFS_LATENCY_US=2000 "$probe" "$work/other/f.bin" 100 4096)
    else
        t=$(model MPISTAGE_PFS_LATENCY_US=2000 MPISTAGE_PFS_OFF=1 \
            "$probe" "$work/data/f.bin" 100 4096)
    fi
    ge 0.1 "$t" || fail "$run: 100 preads took $t s, expected no modelled delay"
    echo "$run: 100 preads -> $t s"
done

# A Python process: os.pread and a buffered file read are both delayed.
t=$(model MPISTAGE_PFS_LATENCY_US=2000 "$py" -c "
import os, time
fd = os.open('$work/data/f.bin', os.O_RDONLY)
t0 = time.perf_counter()
for i in range(50):
    os.pread(fd, 100, i * 4096)
with open('$work/data/f.bin', 'rb') as f:
    for i in range(50):
        f.seek(i * 65536)
        f.read(100)
print(time.perf_counter() - t0)")
ge "$t" 0.2 || fail "python: 100 reads took $t s under 2 ms latency (expected >= 0.2 s)"
echo "python: 50 os.pread + 50 buffered reads x 2 ms -> $t s"
echo "pfs model: OK"
