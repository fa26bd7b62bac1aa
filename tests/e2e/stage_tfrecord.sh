#!/usr/bin/env bash
# End to end for TFRecord (issue: record files): the real files of ../shared/data/tfrecord with
# their known answers (SOURCES.md), index files, bad input on every rank, --on-corrupt skip.
# Usage: stage_tfrecord.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
cli="$1"; work="$2"; data="${MPISTAGE_TEST_DATA_DIR:-$3}/tfrecord"; fmnist="$4"
if [ ! -f "$data/../SOURCES.md" ]; then
    echo "SKIP: shared test data not found in '$data/..': set MPISTAGE_TEST_DATA_DIR to the directory that holds SOURCES.md"
    exit 77
fi
mpiexec="${MPIEXEC:-mpirun}"
# Every rank prints its copy of an agreed error (by default only rank 0 prints it, see
# tests/e2e/cli_messages.sh), so the checks below see that all ranks got the same one.
export MPISTAGE_ERRORS_ON_EVERY_RANK=1
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
spotify="$data/spotify_part-00000-of-00004.tfrecords"

expect_ok() {  # expect_ok NP EXPECTED_VALID ARGS...: exit 0, exactly-once OK, equal batches
    local np="$1" expected="$2"; shift 2
    local json="$work/report.json" out
    out=$(timeout 300 "$mpiexec" -np "$np" --oversubscribe "$cli" stage "$@" --verify --json "$json") \
        || { echo "$out"; fail "-np $np $* exited non-zero"; }
    grep -q '^exactly-once: OK$' <<<"$out" || { echo "$out"; fail "-np $np $*: not exactly once"; }
    python3 - "$json" "$expected" <<'PY' || fail "JSON check failed: -np $np $*"
import json, sys
r = json.load(open(sys.argv[1]))
for e in r["epochs"]:
    assert len(set(e["batches_per_rank"])) == 1, e["batches_per_rank"]
    assert sum(e["valid_samples_per_rank"]) == int(sys.argv[2]), (sum(e["valid_samples_per_rank"]), sys.argv[2])
    assert e["duplicates"] == 0 and e["missing"] == 0
PY
}

expect_error() {  # expect_error NP PATTERN ARGS...: non-zero within 30 s, same message on all ranks
    local np="$1" pattern="$2"; shift 2
    local start rc n
    start=$(date +%s)
    set +e
    timeout 60 "$mpiexec" -np "$np" --oversubscribe "$cli" stage "$@" >"$work/err.out" 2>"$work/err.txt"
    rc=$?
    set -e
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$work/err.txt"; fail "$* : rc=$rc"; }
    [ $(( $(date +%s) - start )) -le 30 ] || fail "$* took more than 30 s"
    n=$(grep -E -c "mpistage: rank [0-9]+: [A-Za-z]+Error: .*$pattern" "$work/err.txt" || true)
    [ "$n" -eq "$np" ] || { cat "$work/err.txt"; fail "$*: expected '$pattern' on $np ranks, got $n"; }
    [ "$(grep -E "mpistage: rank" "$work/err.txt" | sed 's/^mpistage: rank [0-9]*: //' | sort -u | wc -l)" -eq 1 ] \
        || { cat "$work/err.txt"; fail "$*: ranks report different errors"; }
}

for np in 1 2 3 4; do
    expect_ok "$np" 3750 "$spotify" --remainder mask
    expect_ok "$np" 3750 "$spotify" --index "$data/spotify_part-00000-of-00004.idx" --remainder pad -b 7
    expect_ok "$np" 37 "$data/roboflow_37.tfrecord" --remainder mask -b 5
done
expect_ok 4 9909 "$data"/tfx_train/*.gz --remainder mask -b 16
expect_ok 3 9909 "$data"/tfx_train/*.gz --remainder mask -b 16 --shuffle local --epochs 2
expect_ok 4 3797 "$spotify" "$data/spotify_prediction_log.tfrecords" "$data/roboflow_37.tfrecord" --remainder mask

# Known answers: every spotify payload size equals the DALI index's size - 16.
"$cli" index "$spotify" -o "$work/spotify.idx" >/dev/null
cmp -s "$work/spotify.idx" "$data/spotify_part-00000-of-00004.idx" || fail "mpistage index differs from the reference .idx"
timeout 60 "$mpiexec" -np 3 --oversubscribe "$cli" index "$spotify" -o "$work/spotify3.idx" >/dev/null
cmp -s "$work/spotify3.idx" "$data/spotify_part-00000-of-00004.idx" || fail "index at 3 ranks differs"

# Bad input: LFS pointer, truncated copy, flipped payload byte, empty file, index of another file.
head -c 1500000 "$spotify" > "$work/truncated.tfrecords"
cp "$spotify" "$work/flipped.tfrecords"
python3 - "$work/flipped.tfrecords" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(1083 + 12 + 100)          # inside the payload of the third record (offset 1083)
    b = f.read(1)
    f.seek(1083 + 12 + 100)
    f.write(bytes([b[0] ^ 0xFF]))
PY
: > "$work/empty.tfrecord"
for np in 1 3; do
    expect_error "$np" "lfs_pointer.tfrecord: not a TFRecord / truncated record at offset 0" \
        "$data/lfs_pointer.tfrecord" --format tfrecord
    expect_error "$np" "truncated.tfrecords: .*offset 1499607" "$work/truncated.tfrecords"
    expect_error "$np" "flipped.tfrecords: payload CRC32C mismatch in record at offset 1083" \
        "$work/flipped.tfrecords" --remainder mask
    expect_error "$np" "empty.tfrecord" "$work/empty.tfrecord"
    expect_error "$np" "spotify_part-00000-of-00004.idx" "$data/roboflow_37.tfrecord" \
        --index "$data/spotify_part-00000-of-00004.idx"
    expect_ok "$np" 3749 "$work/flipped.tfrecords" --on-corrupt skip --remainder mask
done
python3 - "$work/report.json" <<'PY' || fail "skipped_records not reported"
import json, sys
assert json.load(open(sys.argv[1]))["skipped_records"] == 1
PY

# Fashion-MNIST as tf.train.Example: 60,000 samples exactly once with decoded features.
"$cli" convert idx "$fmnist/train-images-idx3-ubyte.gz" "$fmnist/train-labels-idx1-ubyte.gz" \
    -o "$work/fmnist.tfrecord" --format tfrecord >/dev/null
expect_ok 3 60000 "$work/fmnist.tfrecord" --feature image:bytes/uint8:28x28 --feature label:int64 \
    --remainder mask -b 64 --shuffle local --threads 2
expect_error 2 "feature 'nope'" "$work/fmnist.tfrecord" --feature nope:int64 -b 8
echo "e2e stage_tfrecord: OK"
