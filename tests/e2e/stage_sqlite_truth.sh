#!/usr/bin/env bash
# End to end for SQLite streams that tell the truth: the query as written (trailing ';', a
# trailing comment, WITH), statements that would write refused with no file created or changed,
# ORDER BY random() refused by every sharding and a fixed pseudo-random order exactly once by key,
# a writer committing to the WAL database during a 3-rank --verify run, and a WAL left by a
# writer killed inside a transaction opened at 2 and 3 ranks. Known answers from Python's sqlite3 module.
# Usage: stage_sqlite_truth.sh MPISTAGE_CLI WORK_DIR [TEST_DATA_DIR FASHION_MNIST_DIR (unused)]
set -euo pipefail
rm -rf "$2"
# shellcheck source=../common/sqlite_e2e.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/sqlite_e2e.sh"
db="$work/rows.db"

python3 - "$db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("PRAGMA journal_mode=WAL")
db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v REAL, s TEXT)")
db.executemany("INSERT INTO t VALUES(?, ?, ?)", ((i, i / 4, "row%d" % i) for i in range(20000)))
db.commit()
PY
rows=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM t').fetchone()[0])" "$db")

run() {  # run NP OUT QUERY ARGS...: the CLI's output in OUT, its exit code in $rc
    local np="$1" out="$2" query="$3"; shift 3
    set +e
    timeout 120 "$mpiexec" -np "$np" --oversubscribe "$cli" stage --sqlite "$db" \
        --query "$query" "$@" >"$out" 2>&1
    rc=$?
    set -e
}
expect_once() {  # expect_once NP QUERY ROWS ARGS...: --verify OK with ROWS rows
    local np="$1" query="$2" want="$3"; shift 3
    run "$np" "$work/out.txt" "$query" --verify --json "$work/report.json" "$@"
    [ "$rc" -eq 0 ] && grep -q '^exactly-once: OK$' "$work/out.txt" \
        || { cat "$work/out.txt"; fail "-np $np '$query' $*: rc=$rc, not exactly once"; }
    python3 - "$work/report.json" "$want" <<'PY' || { cat "$work/out.txt"; fail "report: '$query' $*"; }
import json, sys
r = json.load(open(sys.argv[1]))
[e] = r["epochs"]
assert r["num_samples"] == int(sys.argv[2]), (r["num_samples"], sys.argv[2])
assert sum(e["valid_samples_per_rank"]) == int(sys.argv[2]) and e["exactly_once"], e
PY
    echo "ok: -np $np '$query' $*"
}
expect_refused() {  # expect_refused NP QUERY TEXT ARGS...: fails, naming TEXT, on every rank
    local np="$1" query="$2" text="$3"; shift 3
    run "$np" "$work/err.txt" "$query" "$@"
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q -- "$text" "$work/err.txt" \
        || { cat "$work/err.txt"; fail "-np $np '$query': rc=$rc, not refused with '$text'"; }
    echo "ok: refused -np $np '$query'"
}

# The query as written.
expect_once 3 "SELECT id, v, s FROM t;" "$rows"
expect_once 3 "SELECT id, v, s FROM t -- every row" "$rows"
expect_once 3 "SELECT id, v, s FROM t;" "$rows" --shard range:id
expect_once 2 "WITH w AS (SELECT id, v FROM t WHERE id % 2 = 0) SELECT * FROM w; -- even" 10000

# Refused before anything runs; no file created or changed.
sums() { (cd "$work" && sha256sum rows.db* 2>/dev/null; ls "$work"); }
before=$(sums)
expect_refused 2 "DELETE FROM t" "refused before it runs"
expect_refused 2 "VACUUM INTO '$work/copy.db'" "refused before it runs"
expect_refused 2 "ATTACH '$work/other.db' AS o" "refused before it runs"
expect_refused 2 "SELECT id FROM t; DROP TABLE t" "more than one statement"
rm -f "$work/err.txt"
[ "$before" = "$(sums)" ] || fail "a refused statement created or changed a file"
echo "ok: no file created or changed"

# ORDER BY random(): refused by every sharding at 3 ranks (not deterministic); the advised fixed
# pseudo-random order is exactly once by key.
expect_refused 3 "SELECT id, s FROM t ORDER BY random()" "random()" --shard chunk
expect_refused 3 "SELECT id, s FROM t ORDER BY random()" "random()" --shard hash:id
expect_once 3 "SELECT id, s FROM t ORDER BY (id * 1103515245 + 7) % 2147483648" "$rows" --shard hash:id

# A writer committing during a 3-rank run: one snapshot, --verify right.
python3 - "$db" "$work/writer.stop" "$work/writer.started" <<'PY' &
import os, sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
i = 100000
while not os.path.exists(sys.argv[2]):
    db.execute("INSERT INTO t VALUES(?, ?, ?)", (i, i / 4, "new%d" % i))
    i += 1
    if i == 100020:
        open(sys.argv[3], "w").close()
    time.sleep(0.0005)
PY
writer=$!
for _ in $(seq 600); do [ -e "$work/writer.started" ] && break; sleep 0.05; done
[ -e "$work/writer.started" ] || fail "the writer did not start committing"
run 3 "$work/out.txt" "SELECT id, v, s FROM t" --verify --json "$work/report.json" --chunk-rows 64
touch "$work/writer.stop"
wait "$writer"
[ "$rc" -eq 0 ] && grep -q '^exactly-once: OK$' "$work/out.txt" \
    || { cat "$work/out.txt"; fail "concurrent writer: rc=$rc"; }
python3 - "$work/report.json" "$rows" <<'PY' || { cat "$work/out.txt"; fail "concurrent writer report"; }
import json, sys
r = json.load(open(sys.argv[1]))
[e] = r["epochs"]
assert r["num_samples"] > int(sys.argv[2]), "the writer committed nothing before the run"
assert sum(e["valid_samples_per_rank"]) == r["num_samples"] and e["exactly_once"], e
PY
echo "ok: a writer committing during a 3-rank run, one snapshot"

# A writer killed inside a transaction leaves its WAL: opens at 2 and 3 ranks.
rows=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM t').fetchone()[0])" "$db")
set +e
python3 - "$db" <<'PY'
import os, signal, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN")
for i in range(200000, 220000):  # 20 MB: more than the page cache, spilled into the WAL
    db.execute("INSERT INTO t VALUES(?, ?, ?)", (i, 0.0, "lost" * 250))
os.kill(os.getpid(), signal.SIGKILL)
PY
set -e
[ -s "$db-wal" ] || fail "the killed writer left no WAL"
for np in 2 3; do
    expect_once "$np" "SELECT id, s FROM t ORDER BY id" "$rows"
done
echo "PASS"
