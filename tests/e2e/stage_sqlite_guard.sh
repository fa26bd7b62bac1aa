#!/usr/bin/env bash
# SQL that cannot split wrong (issue 42, acceptance 7): every stream case of the issue, at 1, 2
# and 3 ranks, with each sharding (chunk, hash:id, range:id), with and without --verify, ends
# either exactly once (the rows Python's sqlite3 counts, each delivered once: with --verify the
# JSON report's exactly_once with no duplicates and none missing; always the report's
# num_samples, valid samples and the ranks' samples equal to that count)
# or with a refusal naming its cause, printed once, exit 2, within 60 s:
#   random() in ORDER BY ... LIMIT or in WHERE, date('now'), an unbound parameter, two result
#   columns of one name, an empty name, a column named like another's NULL mask field;
#   LIMIT without ORDER BY, an ORDER BY with ties and LIMIT, pragma_database_list and the
#   fixed pseudo-random order that the --shuffle refusal advises (taken from that message) are
#   exactly once.
# Also: --max-batch-samples 0 of a stream names the flag. By default a covering subset (each
# sharding at 3 ranks with --verify, chunk at 2 ranks and range:id at 1 without); the whole
# matrix with MPISTAGE_STRESS=1.
# Usage: stage_sqlite_guard.sh MPISTAGE_CLI WORK_DIR [TEST_DATA_DIR FASHION_MNIST_DIR (unused)]
set -euo pipefail
# shellcheck source=../common/sqlite_e2e.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/sqlite_e2e.sh"
unset MPISTAGE_ERRORS_ON_EVERY_RANK
db="$work/guard.db"
python3 - "$db" <<'PY'
import os, sqlite3, sys
if os.path.exists(sys.argv[1]):
    os.remove(sys.argv[1])
db = sqlite3.connect(sys.argv[1])
db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, grp INTEGER)")
db.executemany("INSERT INTO t VALUES(?, ?, ?)", ((i, "row%d" % i, i % 7) for i in range(1, 1001)))
db.commit()
PY

run() {  # run NP QUERY ARGS...: sets rc; output in $work/out, $work/err
    local np="$1" query="$2"; shift 2
    set +e
    timeout -k 5 60 "$mpiexec" -np "$np" --oversubscribe "$cli" stage --sqlite "$db" \
        --query "$query" --batch-size 16 --chunk-rows 8 --quiet "$@" >"$work/out" 2>"$work/err"
    rc=$?
    set -e
}

# refused NP QUERY CAUSE ARGS...: exit 2, one error line naming CAUSE (a fixed string).
refused() {
    local np="$1" query="$2" cause="$3"; shift 3
    run "$np" "$query" "$@"
    [ "$rc" -eq 2 ] || { cat "$work/out" "$work/err"; fail "np $np '$query' $*: rc=$rc, want 2 (refused)"; }
    [ "$(grep -c '^mpistage: ' "$work/err")" -eq 1 ] \
        || { cat "$work/err"; fail "np $np '$query' $*: the refusal is not printed once"; }
    grep '^mpistage: ' "$work/err" | grep -qF -e "$cause" \
        || { cat "$work/err"; fail "np $np '$query' $*: the refusal does not name '$cause'"; }
}

# once NP QUERY ARGS...: exit 0; every row of the query once (count from Python's sqlite3).
once() {
    local np="$1" query="$2"; shift 2
    local want
    want=$(python3 -c 'import sqlite3,sys; print(len(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchall()))' "$db" "$query")
    run "$np" "$query" --json "$work/report.json" "$@"
    [ "$rc" -eq 0 ] || { cat "$work/out" "$work/err"; fail "np $np '$query' $*: rc=$rc, want 0"; }
    local verified=0
    case " $* " in *" --verify "*) verified=1 ;; esac
    python3 - "$work/report.json" "$np" "$want" "$verified" <<'PY' || { cat "$work/out"; fail "np $np '$query' $*: report"; }
import json, sys
r = json.load(open(sys.argv[1]))
np_, want, verified = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
if verified:  # --verify: every delivered row's content against the snapshot's rows
    e = r["epochs"][0]
    assert e["exactly_once"] and e["duplicates"] == 0 and e["missing"] == 0, e
assert r["status"] == "ok" and r["world_size"] == np_, r
assert r["num_samples"] == want, (r["num_samples"], want)
[e] = r["epochs"]
assert e["valid_samples"] == want, (e["valid_samples"], want)
assert sum(k["samples"] for k in r["ranks"]) == want, (r["ranks"], want)
assert len(set(e["batches_per_rank"])) == 1, e["batches_per_rank"]
PY
}

# The order the --shuffle refusal advises, taken from its message (it must work as advised).
run 1 "SELECT id FROM t" --shuffle global
[ "$rc" -eq 2 ] || { cat "$work/err"; fail "--shuffle of a stream: rc=$rc, want 2"; }
advice=$(grep -o "ORDER BY ([^)]*) % [0-9]*" "$work/err" | head -1 || true)
[ -n "$advice" ] || { cat "$work/err"; fail "the --shuffle refusal advises no ORDER BY expression"; }
grep -qi 'random()' "$work/err" && ! grep -q 'random() is refused' "$work/err" \
    && { cat "$work/err"; fail "the --shuffle refusal still advises random()"; }
echo "ok: --shuffle advises '$advice'"

refused 2 "SELECT id FROM t" "--max-batch-samples" --batch-bytes 65536 --max-batch-samples 0
echo "ok: --max-batch-samples 0 names the flag"

# guard_case NP SHARD [--verify]: the 7 refusals and the 5 exactly-once queries.
cases=0
guard_case() {
    local np="$1" shard="$2"; shift 2
    local a=(--shard "$shard" "$@")
    refused "$np" "SELECT id, name FROM t ORDER BY random() LIMIT 100" "random()" "${a[@]}"
    refused "$np" "SELECT id, name FROM t WHERE abs(random()) % 2 = 0" "random()" "${a[@]}"
    refused "$np" "SELECT id, date('now') AS d FROM t" "'now'" "${a[@]}"
    refused "$np" "SELECT id, name FROM t WHERE id > ?" "parameter" "${a[@]}"
    refused "$np" "SELECT id, name AS id FROM t" "both named 'id'" "${a[@]}"
    refused "$np" "SELECT id, 1 AS \"\" FROM t" "has an empty name" "${a[@]}"
    refused "$np" "SELECT id, grp AS maybe, 1 AS \"maybe.valid\" FROM t" \
        "'maybe.valid'" --nulls mask "${a[@]}"
    once "$np" "SELECT id, name FROM t LIMIT 100" "${a[@]}"
    once "$np" "SELECT id, name, grp FROM t ORDER BY grp LIMIT 100" "${a[@]}"
    once "$np" "SELECT id, name FROM t $advice" "${a[@]}"
    once "$np" "SELECT id, name FROM t $advice LIMIT 100" "${a[@]}"
    # seq has no declared type: typed int64 for range:id.
    once "$np" "SELECT seq AS id, name FROM pragma_database_list" --column id:int64 "${a[@]}"
    cases=$((cases + 12))
    echo "ok: np $np --shard $shard $*"
}

if [ "${MPISTAGE_STRESS:-0}" = "1" ]; then
    # The whole matrix: 216 runs, about 6.5 min on a loaded 2-core machine.
    for np in 1 2 3; do
        for shard in chunk hash:id range:id; do
            guard_case "$np" "$shard"
            guard_case "$np" "$shard" --verify
        done
    done
else
    # By default each sharding once at an odd world size with --verify, and at 2 ranks
    # without (the refusals are agreed before any row is read: the world size only needs peers).
    for shard in chunk hash:id range:id; do
        guard_case 3 "$shard" --verify
    done
    guard_case 2 chunk
    guard_case 1 range:id
fi
echo "PASS ($cases cases)"
