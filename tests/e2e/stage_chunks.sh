#!/usr/bin/env bash
# End to end for `--shuffle chunks` (issue 40, docs/shuffle.md): an HDF5 file written by h5py,
# staged with a budget of a quarter of its bytes at 1-4 ranks for 3 epochs with --verify
# (fixed batches, drop and mask): exactly once, equal steps, the chunk size derived from the
# budget, each batch from far fewer chunks than a full shuffle's; a state saved at 4 ranks
# mid-epoch resumes at 3 and then at 2 exactly once, keeping the epoch's order (order_world_size
# 4); `--stage auto` over budget turns `--shuffle global` into chunks and says so; budget batches
# (--batch-bytes) at 1-4 ranks and resumed 4 -> 3 -> 2; chunk flags with another shuffle and
# --balance-steps are refused by name.
# Usage: stage_chunks.sh MPISTAGE_CLI WORK_DIR [TEST_DATA_DIR FASHION_MNIST_DIR (unused)]
set -euo pipefail
cli="$1"; work="$2"
mpiexec="${MPIEXEC:-mpirun}"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
h5="$work/rows.h5"
n=40003

"${PYTHON:-/usr/bin/python3}" - "$h5" "$n" <<'PY'  # Debian's, with h5py (install-deps.sh)
import sys
import h5py
import numpy as np
n = int(sys.argv[2])
with h5py.File(sys.argv[1], "w") as f:
    f["x"] = (np.arange(n)[:, None] * 16 + np.arange(16)[None, :]).astype(np.float32)
    f["y"] = np.arange(n, dtype=np.int64)
PY
bytes=$((n * (16 * 4 + 8)))
budget=$((bytes / 4))

check_report() {  # report.json ranks remainder
    python3 - "$@" "$n" "$budget" <<'PY'
import json, sys
path, np_, remainder, n, budget = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
r = json.load(open(path))
o = r["options"]
assert o["shuffle"] == "chunks" and o["sharding"] == "global", o
chunk = o["chunk_samples"]
# Two windows of up to 257 chunks and one in flight within the budget: budget / 515 bytes per
# chunk, in whole pages (4 KiB) where that is at least one, 72 bytes a sample.
share = budget // 515
share = share // 4096 * 4096 if share >= 4096 else share
assert chunk == max(1, share // 72), (chunk, budget)
assert o["window_chunks"] == 256, o
assert "derived from the budget" in r["stage"]["shuffle_note"], r["stage"]
for e in r["epochs"]:
    assert e["exactly_once"], e
    assert len(set(e["batches_per_rank"])) == 1, e
    q = e["shuffle_quality"]
    assert q["chunk_samples"] == chunk, q
    # Each batch draws from one or two windows of 256 chunks of its rank.
    assert q["chunks_per_batch"] <= 2 * 256 + 2, q
    assert q["chunks_per_batch"] < q["full_shuffle_chunks_per_batch"], q
    if remainder == "mask":
        assert sum(e["valid_samples_per_rank"]) == n, e
PY
}

for np in 1 2 3 4; do
    for remainder in drop mask; do
        timeout 300 "$mpiexec" -np "$np" --oversubscribe "$cli" stage "$h5" --shuffle chunks \
            --stage-budget "$budget" --batch-size 24 --remainder "$remainder" --epochs 3 \
            --verify --json "$work/report.json" >"$work/out.txt" 2>&1 \
            || { cat "$work/out.txt"; fail "-np $np $remainder exited non-zero"; }
        grep -q '^exactly-once: OK$' "$work/out.txt" \
            || { cat "$work/out.txt"; fail "-np $np $remainder: not exactly once"; }
        check_report "$work/report.json" "$np" "$remainder" \
            || { cat "$work/out.txt"; fail "-np $np $remainder: JSON report"; }
    done
done

# Resume 4 -> 3 -> 2 ranks inside epoch 1: exactly once across the three runs, the order of
# the run that began the epoch (order_world_size 4) kept in the state.
common="--shuffle chunks --stage-budget $budget --batch-size 24 --epochs 2"
# shellcheck disable=SC2086
timeout 300 "$mpiexec" -np 4 --oversubscribe "$cli" stage "$h5" $common \
    --save-state "$work/s.json" --stop-after-steps 450 --verify >"$work/out.txt" 2>&1 \
    || { cat "$work/out.txt"; fail "save at 4 ranks exited non-zero"; }
grep -q '^exactly-once so far: OK' "$work/out.txt" || { cat "$work/out.txt"; fail "4 ranks: verify"; }
python3 - "$work/s.json" <<'PY' || fail "state at 4 ranks"
import json, sys
s = json.load(open(sys.argv[1]))["loader"]
assert s["epoch"] == 1 and s["steps_consumed"] > 0, s
assert s["order_world_size"] == 4 and s["world_size"] == 4, s
assert s["shuffle"] == "chunks" and s["chunk_samples"] >= 1 and s["window_chunks"] == 256, s
PY
# shellcheck disable=SC2086
timeout 300 "$mpiexec" -np 3 --oversubscribe "$cli" stage "$h5" $common --resume "$work/s.json" \
    --save-state "$work/s3.json" --stop-after-steps 10 --verify >"$work/out.txt" 2>&1 \
    || { cat "$work/out.txt"; fail "resume at 3 ranks exited non-zero"; }
grep -q '^exactly-once so far: OK' "$work/out.txt" || { cat "$work/out.txt"; fail "3 ranks: verify"; }
python3 - "$work/s3.json" <<'PY' || fail "state at 3 ranks"
import json, sys
s = json.load(open(sys.argv[1]))["loader"]
assert s["epoch"] == 1 and s["world_size"] == 3 and s["order_world_size"] == 4, s
PY
# shellcheck disable=SC2086
timeout 300 "$mpiexec" -np 2 --oversubscribe "$cli" stage "$h5" $common --resume "$work/s3.json" \
    --verify --json "$work/resumed.json" >"$work/out.txt" 2>&1 \
    || { cat "$work/out.txt"; fail "resume at 2 ranks exited non-zero"; }
grep -q '^exactly-once: OK$' "$work/out.txt" \
    || { cat "$work/out.txt"; fail "4 -> 3 -> 2 ranks: not exactly once across the runs"; }
python3 - "$work/resumed.json" <<'PY' || fail "resumed JSON report"
import json, sys
e = json.load(open(sys.argv[1]))["epochs"][0]
assert e["resumed"] and e["exactly_once"] and e["prior_run_samples"] > 0, e
PY

# stage auto over budget: the global shuffle becomes chunks, in one line and in the JSON.
timeout 300 "$mpiexec" -np 2 --oversubscribe "$cli" stage "$h5" --shuffle global --stage auto \
    --stage-budget "$budget" --batch-size 24 --verify --json "$work/auto.json" \
    >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; fail "stage auto exited non-zero"; }
grep -q "shuffle: auto: the data exceeds the stage budget, so shuffle 'chunks' replaces 'global'" \
    "$work/out.txt" || { cat "$work/out.txt"; fail "stage auto: no line about chunks"; }
python3 - "$work/auto.json" <<'PY' || fail "stage auto JSON"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["options"]["shuffle"] == "chunks" and r["stage"]["tier"] == "file", r["options"]
assert r["epochs"][0]["exactly_once"], r["epochs"][0]
PY

# Budget batches (--batch-bytes): each rank's part of the chunk order packed into batches of
# at most 4096 bytes (56 samples of 72 bytes), at 1-4 ranks for 3 epochs, exactly once, equal
# steps, read through the chunk read-ahead; a state saved at 4 ranks mid-epoch resumes at 3,
# saved again there, and resumes at 2.
for np in 1 2 3 4; do
    timeout 300 "$mpiexec" -np "$np" --oversubscribe "$cli" stage "$h5" --shuffle chunks \
        --stage-budget "$budget" --batch-bytes 4096 --max-batch-samples 64 --epochs 3 --verify \
        --json "$work/budget.json" >"$work/out.txt" 2>&1 \
        || { cat "$work/out.txt"; fail "budget batches -np $np exited non-zero"; }
    grep -q '^exactly-once: OK$' "$work/out.txt" \
        || { cat "$work/out.txt"; fail "budget batches -np $np: not exactly once"; }
    python3 - "$work/budget.json" "$np" "$n" <<'PY' || { cat "$work/out.txt"; fail "budget -np $np: JSON"; }
import json, sys
r = json.load(open(sys.argv[1]))
np_, n = int(sys.argv[2]), int(sys.argv[3])
assert r["options"]["shuffle"] == "chunks" and r["input"]["batching"] == "budget", r["options"]
reads = [k["read_ahead"]["chunks"] for k in r["ranks"]]
assert all(c > 0 for c in reads), ("read through the chunk read-ahead", reads)
assert len(r["epochs"]) == 3, r["epochs"]
for e in r["epochs"]:
    assert e["exactly_once"] and sum(e["valid_samples_per_rank"]) == n, e
    assert len(set(e["batches_per_rank"])) == 1 and e["batches_per_rank"][0] == e["steps"], e
    assert e["max_batch_samples"] == 56, e  # 4096 // 72
    assert e["real_batches"] + e["padding_steps"] == e["steps"] * np_, e
PY
done
budget_common="--shuffle chunks --stage-budget $budget --batch-bytes 4096 --max-batch-samples 64 --epochs 2"
# shellcheck disable=SC2086
timeout 300 "$mpiexec" -np 4 --oversubscribe "$cli" stage "$h5" $budget_common \
    --save-state "$work/b.json" --stop-after-steps 250 --verify >"$work/out.txt" 2>&1 \
    || { cat "$work/out.txt"; fail "budget: save at 4 ranks exited non-zero"; }
# shellcheck disable=SC2086
timeout 300 "$mpiexec" -np 3 --oversubscribe "$cli" stage "$h5" $budget_common \
    --resume "$work/b.json" --save-state "$work/b3.json" --stop-after-steps 10 --verify \
    >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; fail "budget: resume at 3 ranks exited non-zero"; }
python3 - "$work/b3.json" <<'PY' || fail "budget: state at 3 ranks"
import json, sys
s = json.load(open(sys.argv[1]))["loader"]
assert s["epoch"] == 1 and s["world_size"] == 3 and s["order_world_size"] == 4, s
assert s["run_start_samples"] > 0 and s["batch_bytes"] == 4096, s
PY
# shellcheck disable=SC2086
timeout 300 "$mpiexec" -np 2 --oversubscribe "$cli" stage "$h5" $budget_common \
    --resume "$work/b3.json" --verify >"$work/out.txt" 2>&1 \
    || { cat "$work/out.txt"; fail "budget: resume at 2 ranks exited non-zero"; }
grep -q '^exactly-once: OK$' "$work/out.txt" \
    || { cat "$work/out.txt"; fail "budget batches 4 -> 3 -> 2 ranks: not exactly once across the runs"; }

# Refusals, the same on every rank, naming what does not fit.
refuse() {  # pattern args...
    local pattern="$1"; shift
    if timeout 120 "$mpiexec" -np 2 --oversubscribe "$cli" stage "$h5" "$@" >"$work/out.txt" 2>&1
    then
        cat "$work/out.txt"; fail "accepted: $*"
    fi
    grep -q "$pattern" "$work/out.txt" || { cat "$work/out.txt"; fail "no clear error for: $*"; }
}
refuse "chunk_samples and window_chunks are parameters of shuffle 'chunks'" --shuffle global \
    --chunk-samples 10
refuse "does not combine with shuffle 'chunks'" --shuffle chunks --balance-steps
echo "stage_chunks: OK"
