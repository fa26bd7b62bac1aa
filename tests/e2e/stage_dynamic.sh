#!/usr/bin/env bash
# End to end for dynamic batching of files (issue 10): a TFRecord file with heavy-tailed record
# sizes written by Python (its own CRC32C), staged with `--batch-bytes` at 1-4 ranks with
# --verify: exactly once, equal steps, the oversize count equal to the records over the budget
# (counted by Python), every JSON key documented in the README; flags that do not combine are a
# ConfigError; --stage memory, --prefetch, --threads and a 4 -> 3 rank resume work.
# Usage: stage_dynamic.sh MPISTAGE_CLI WORK_DIR [TEST_DATA_DIR FASHION_MNIST_DIR (unused)]
set -euo pipefail
cli="$1"; work="$2"
mpiexec="${MPIEXEC:-mpirun}"
readme="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/README.md"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
tfr="$work/variable.tfrecord"
budget=8192

python3 - "$tfr" "$budget" >"$work/expected.txt" <<'PY'
import random, struct, sys
def crc32c(data, table=[]):
    if not table:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            table.append(c)
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF
rng = random.Random(4)
n, over, budget = 1200, 0, int(sys.argv[2])
with open(sys.argv[1], "wb") as f:
    for i in range(n):
        size = min(40000, int(30 / (1 - rng.random()) ** (1 / 1.1)))
        over += size > budget
        payload = bytes((i * 31 + k) & 0xFF for k in range(size))
        length = struct.pack("<Q", size)
        f.write(length + struct.pack("<I", masked(length)) + payload +
                struct.pack("<I", masked(payload)))
print(n, over)
PY
read -r records oversize <"$work/expected.txt"

# --shuffle chunks with a stage budget of a quarter of the file: each rank's part of the chunk
# order packed into budget batches (records of every size, read from the file directly).
quarter=$(( $(stat -c %s "$tfr") / 4 ))
for np in 1 2 3 4; do
    for mode in "--sharding byte_range --shuffle local --seed 3" \
                "--sharding global --shuffle global --bucket-window 8" \
                "--sharding global --shuffle chunks --stage-budget $quarter --bucket-window 4"; do
        # shellcheck disable=SC2086
        timeout 300 "$mpiexec" -np "$np" --oversubscribe "$cli" stage "$tfr" \
            --batch-bytes "$budget" --max-batch-samples 512 $mode --epochs 2 --verify \
            --json "$work/report.json" >"$work/out.txt" 2>&1 \
            || { cat "$work/out.txt"; fail "-np $np $mode exited non-zero"; }
        grep '^exactly-once: OK$' "$work/out.txt" >/dev/null \
            || { cat "$work/out.txt"; fail "-np $np $mode: not exactly once"; }
        python3 - "$work/report.json" "$readme" "$np" "$records" "$oversize" "$tfr" <<'PY' \
            || fail "-np $np $mode: JSON report"
import json, sys
r = json.load(open(sys.argv[1]))
readme = open(sys.argv[2]).read()
np_, records, oversize = (int(x) for x in sys.argv[3:6])
assert r["status"] == "ok" and r["world_size"] == np_, r
assert r["num_samples"] == records, r["num_samples"]
for e in r["epochs"]:
    assert len(set(e["batches_per_rank"])) == 1, e["batches_per_rank"]
    assert e["batches_per_rank"][0] == e["steps"], e
    assert sum(e["valid_samples_per_rank"]) == records, e
    assert e["exactly_once"] and e["duplicates"] == 0 and e["missing"] == 0, e
    assert e["oversize_batches"] == oversize, (e["oversize_batches"], oversize)
    assert 1 <= e["min_batch_samples"] <= e["max_batch_samples"] <= 512, e
    assert e["real_batches"] + e["padding_steps"] == e["steps"] * np_, e
    assert 0 <= e["budget"]["padding_waste"] < 1, e
    assert r["input"] == {"kind": "tfrecord", "batching": "budget", "paths": [sys.argv[6]]}, r
assert sum(k["samples"] for k in r["ranks"]) == 2 * records, r["ranks"]
def keys(node):
    if isinstance(node, dict):
        for k, v in node.items():
            yield k
            yield from keys(v)
    elif isinstance(node, list):
        for v in node:
            yield from keys(v)
missing = sorted({k for k in keys(r) if f"`{k}`" not in readme})
assert not missing, f"JSON keys not documented in README.md: {missing}"
PY
    done
done

# Budget batches are served by the one Loader: the memory tier, prefetch and I/O threads, and
# a state saved at 4 ranks resumes at 3 under global sharding, exactly once across both runs.
common="--batch-bytes $budget --max-batch-samples 512 --sharding global --shuffle global --seed 5"
# shellcheck disable=SC2086
timeout 300 "$mpiexec" -np 4 --oversubscribe "$cli" stage "$tfr" $common --stage memory \
    --prefetch 3 --threads 2 --save-state "$work/s.json" --stop-after-steps 3 --verify \
    >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; fail "save at 4 ranks exited non-zero"; }
grep -q 'tier memory' "$work/out.txt" || { cat "$work/out.txt"; fail "--stage memory not used"; }
grep -q '^exactly-once so far: OK' "$work/out.txt" || { cat "$work/out.txt"; fail "4 ranks: verify"; }
# shellcheck disable=SC2086
timeout 300 "$mpiexec" -np 3 --oversubscribe "$cli" stage "$tfr" $common --prefetch 2 \
    --threads 3 --resume "$work/s.json" --verify --json "$work/resumed.json" \
    >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; fail "resume at 3 ranks exited non-zero"; }
grep -q '^exactly-once: OK$' "$work/out.txt" \
    || { cat "$work/out.txt"; fail "4 -> 3 ranks: not exactly once across both runs"; }
# The same with --shuffle chunks: the order made for 4 ranks finishes at 3 and then at 2
# (the state saved at 3 is checked against the order of 4), exactly once.
chunks="--batch-bytes $budget --max-batch-samples 512 --shuffle chunks --stage-budget $quarter"
# shellcheck disable=SC2086
timeout 300 "$mpiexec" -np 4 --oversubscribe "$cli" stage "$tfr" $chunks --epochs 2 \
    --save-state "$work/c.json" --stop-after-steps 10 --verify --json "$work/c4-report.json" \
    >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; fail "chunks: save at 4 ranks exited non-zero"; }
# The records are read ahead by chunks (a field of varying size), within each rank's budget.
python3 - "$work/c4-report.json" "$quarter" <<'PY' || { cat "$work/out.txt"; fail "chunks over TFRecord: not read ahead within the budget"; }
import json, sys
j, budget = json.load(open(sys.argv[1])), int(sys.argv[2])
assert "not read ahead" not in j["stage"]["shuffle_note"], j["stage"]["shuffle_note"]
for r in j["ranks"]:
    ra = r["read_ahead"]
    assert ra["chunks"] > 0 and 0 < ra["peak_bytes"] <= budget, (r["rank"], ra, budget)
PY
python3 - "$work/c.json" <<'PY' || fail "chunks: state at 4 ranks"
import json, sys
s = json.load(open(sys.argv[1]))["loader"]
assert s["shuffle"] == "chunks" and s["order_world_size"] == 4 and s["steps_consumed"] > 0, s
assert s["batch_bytes"] > 0, s
PY
# shellcheck disable=SC2086
timeout 300 "$mpiexec" -np 3 --oversubscribe "$cli" stage "$tfr" $chunks --epochs 2 \
    --resume "$work/c.json" --save-state "$work/c3.json" --stop-after-steps 2 --verify \
    >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; fail "chunks: resume at 3 ranks exited non-zero"; }
python3 - "$work/c3.json" <<'PY' || fail "chunks: state at 3 ranks"
import json, sys
s = json.load(open(sys.argv[1]))["loader"]
assert s["world_size"] == 3 and s["order_world_size"] == 4 and s["run_start_samples"] > 0, s
PY
# shellcheck disable=SC2086
timeout 300 "$mpiexec" -np 2 --oversubscribe "$cli" stage "$tfr" $chunks --epochs 2 \
    --resume "$work/c3.json" --verify >"$work/out.txt" 2>&1 \
    || { cat "$work/out.txt"; fail "chunks: resume at 2 ranks exited non-zero"; }
grep -q '^exactly-once: OK$' "$work/out.txt" \
    || { cat "$work/out.txt"; fail "chunks 4 -> 3 -> 2 ranks: not exactly once across the runs"; }
python3 - "$work/resumed.json" "$records" <<'PY' || fail "resumed JSON report"
import json, sys
r = json.load(open(sys.argv[1]))
e = r["epochs"][0]
assert e["exactly_once"] and e["duplicates"] == 0 and e["missing"] == 0, e
assert e["resumed"] and not e["interrupted"], e
assert e["prior_run_samples"] > 0, e
assert e["prior_run_samples"] + sum(e["valid_samples_per_rank"]) == int(sys.argv[2]), e
PY

# Flags of fixed batches are refused, the same way on every rank.
for extra in "--balance-steps --sharding global" "--two-phase on --sharding global" \
             "--batch-size 8" "--remainder mask"; do
    # shellcheck disable=SC2086
    if timeout 120 "$mpiexec" -np 2 --oversubscribe "$cli" stage "$tfr" --batch-bytes "$budget" \
        $extra >"$work/out.txt" 2>&1; then
        cat "$work/out.txt"; fail "--batch-bytes with $extra was accepted"
    fi
    grep 'ConfigError: .*does not combine with --batch-bytes' "$work/out.txt" >/dev/null \
        || { cat "$work/out.txt"; fail "--batch-bytes with $extra: no clear ConfigError"; }
done
echo "e2e stage_dynamic: OK"
