#!/usr/bin/env bash
# End to end for streams (issue 10): a 40,000-row SQLite database with rows of random size,
# staged by `mpistage stage --sqlite` at 3 ranks with chunk and hash sharding and a byte budget
# (exactly once, equal batch counts), then stopped after K steps with --save-state and resumed
# (same and different world size): the two runs together deliver every row exactly once, checked
# against Python's own sqlite3 reader.
# Usage: stage_sqlite.sh MPISTAGE_CLI WORK_DIR [TEST_DATA_DIR FASHION_MNIST_DIR (unused)]
set -euo pipefail
# shellcheck source=../common/sqlite_e2e.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/sqlite_e2e.sh"
db="$work/rows.db"
query='SELECT id, payload FROM t'
# 40,000 rows (about 70 MB): enough for 137 steps of 3 ranks x 32 rows before the stop below
# and for the heavy tail to give oversize batches; staged 14 times here.
rows=40000

python3 - "$db" "$rows" <<'PY'
import os, random, sqlite3, sys
path = sys.argv[1]
if os.path.exists(path):
    os.remove(path)
db = sqlite3.connect(path)
db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, payload BLOB)")
rng = random.Random(10)
# Heavy tail: most rows small, one in 100 up to 100 kB (over the 64 KiB budget below).
def size():
    return rng.randrange(60000, 100000) if rng.random() < 0.01 else rng.randrange(0, 2000)
db.executemany("INSERT INTO t VALUES(?, ?)",
               ((i * 3 + 1, rng.randbytes(size())) for i in range(int(sys.argv[2]))))
db.commit()
PY

stage() {  # stage NP OUT ARGS...: runs the CLI, keeps its output in OUT
    local np="$1" out="$2"; shift 2
    timeout 300 "$mpiexec" -np "$np" --oversubscribe "$cli" stage --sqlite "$db" \
        --query "$query" "$@" >"$out" 2>&1 || { cat "$out"; fail "-np $np $* exited non-zero"; }
}

expect_ok() {  # expect_ok NP ARGS...: exactly once, equal batch counts (from the JSON report)
    local np="$1"; shift
    stage "$np" "$work/out.txt" "$@" --verify --json "$work/report.json"
    grep -q '^exactly-once: OK$' "$work/out.txt" || { cat "$work/out.txt"; fail "-np $np $*: not exactly once"; }
    # Independent check of the report: equal batch counts, rows add up to the table.
    python3 - "$work/report.json" "$np" "$rows" <<'PY' || { cat "$work/out.txt"; fail "report check: -np $np $*"; }
import json, sys
r = json.load(open(sys.argv[1]))
np_, rows = int(sys.argv[2]), int(sys.argv[3])
assert r["status"] == "ok" and r["world_size"] == np_ and r["input"]["kind"] == "sqlite", r
assert r["num_samples"] == rows, r["num_samples"]
[e] = r["epochs"]
assert len(set(e["batches_per_rank"])) == 1 and len(e["batches_per_rank"]) == np_, e
assert e["exactly_once"] and e["duplicates"] == 0 and e["missing"] == 0, e
assert sum(e["valid_samples_per_rank"]) == rows, e
assert sum(k["samples"] for k in r["ranks"]) == rows, r["ranks"]
PY
    echo "ok: -np $np $*"
}

# Acceptance 1.
expect_ok 3 --shard chunk
expect_ok 3 --shard hash:id
expect_ok 3 --shard chunk --batch-bytes 65536
grep -q 'oversize batches' "$work/out.txt" || fail "no oversize report"
python3 - "$work/report.json" <<'PY' || fail "the 100 kB rows must be flagged oversize"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["epochs"][0]["oversize_batches"] > 0, r["epochs"]
assert sum(k["oversize_batches"] for k in r["ranks"]) == r["epochs"][0]["oversize_batches"]
PY
expect_ok 2 --shard hash:id --batch-bytes 65536 --on-dry mask
expect_ok 4 --shard chunk --chunk-rows 1000 --on-dry mask
expect_ok 1 --shard chunk

# Acceptance 3: stop after K steps with the state saved, resume; the union is every row once.
python3 - "$db" "$work/all.txt" <<'PY'
import sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute("SELECT id, payload FROM t").fetchall()
open(sys.argv[2], "w").write("\n".join(str(i) for i in range(len(rows))) + "\n")
PY
for shard in chunk hash:id; do
    for np_resume in 3 2; do
        rm -f "$work/state.json"
        stage 3 "$work/first.txt" --shard "$shard" --stop-after-steps 137 \
            --save-state "$work/state.json" --ids-out "$work/first.ids" --verify
        grep -q '^exactly-once so far: OK' "$work/first.txt" || { cat "$work/first.txt"; fail "first part"; }
        [ -s "$work/state.json" ] || fail "--save-state wrote nothing"
        stage "$np_resume" "$work/second.txt" --shard "$shard" --resume "$work/state.json" \
            --ids-out "$work/second.ids" --verify
        grep -q '^exactly-once: OK$' "$work/second.txt" || { cat "$work/second.txt"; fail "resumed part"; }
        python3 - "$work/first.ids" "$work/second.ids" "$work/all.txt" <<'PY' \
            || fail "kill-and-resume ($shard, resumed at $np_resume ranks) lost or repeated rows"
import sys
a = [int(x) for x in open(sys.argv[1])]
b = [int(x) for x in open(sys.argv[2])]
every = [int(x) for x in open(sys.argv[3])]
assert len(a) == 137 * 3 * 32, len(a)
assert not set(a) & set(b), "rows delivered twice"
assert sorted(a + b) == every, (len(a), len(b), len(every))
PY
        echo "ok: stop after 137 steps at 3 ranks, resume at $np_resume ranks, shard $shard"
    done
done

# A missing database and a bad query fail on every rank with the same message, quickly.
set +e
timeout 60 "$mpiexec" -np 3 --oversubscribe "$cli" stage --sqlite "$work/none.db" --query "$query" \
    >"$work/err.out" 2>"$work/err.txt"
rc=$?
set -e
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$work/err.txt"; fail "missing database: rc=$rc"; }
# Rank 0 prints the agreed error once, naming how many ranks failed (all 3).
[ "$(grep -c 'does not exist' "$work/err.txt")" -eq 1 ] && grep -q 'rank 0 and 2 other rank(s)' "$work/err.txt" \
    || { cat "$work/err.txt"; fail "the missing database was not reported once for all ranks"; }
echo "ok: missing database fails on every rank"
echo "PASS"
