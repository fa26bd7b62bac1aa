#!/usr/bin/env bash
# End to end for two-phase reads (issue 9: `--two-phase`, global shuffles without staging):
# Fashion-MNIST as HDF5 and as TFRecord (tf.train.Example), staged with --verify at 1-4 ranks
# (exactly once, equal batches per rank), the JSON says two_phase, and --two-phase outside
# global sharding without staging is the same ConfigError on every rank.
# Usage: stage_two_phase.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
cli="$1"; work="$2"; fmnist="$4"
if [ ! -f "$fmnist/train-images-idx3-ubyte.gz" ]; then
    echo "SKIP: Fashion-MNIST not found in '$fmnist' (Debian package dataset-fashion-mnist)"
    exit 77
fi
mpiexec="${MPIEXEC:-mpirun}"
export MPISTAGE_ERRORS_ON_EVERY_RANK=1
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
h5="$work/train.h5"
tfr="$work/train.tfrecord"
[ -s "$h5" ] || "$cli" convert idx "$fmnist/train-images-idx3-ubyte.gz" \
    "$fmnist/train-labels-idx1-ubyte.gz" -o "$h5"
[ -s "$tfr" ] || "$cli" convert idx "$fmnist/train-images-idx3-ubyte.gz" \
    "$fmnist/train-labels-idx1-ubyte.gz" -o "$tfr" --format tfrecord

run() {  # run NP EXPECTED_VALID ARGS...: exit 0, exactly-once OK, equal batches, two_phase true
    local np="$1" expected="$2"; shift 2
    local json="$work/report-$np.json" out
    out=$(timeout 300 "$mpiexec" -np "$np" --oversubscribe "$cli" stage "$@" --sharding global \
        --shuffle global --two-phase --verify --json "$json") \
        || { echo "$out"; fail "-np $np $* exited non-zero"; }
    grep -q '^exactly-once: OK$' <<<"$out" || { echo "$out"; fail "-np $np $*: not exactly once"; }
    python3 - "$json" "$expected" <<'PY' || fail "JSON check failed: -np $np $*"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["stage"]["two_phase"] is True, r["stage"]
for e in r["epochs"]:
    assert len(set(e["batches_per_rank"])) == 1, e["batches_per_rank"]
    assert sum(e["valid_samples_per_rank"]) == int(sys.argv[2]), sum(e["valid_samples_per_rank"])
    assert e["duplicates"] == 0 and e["missing"] == 0, e
PY
}

for np in 1 2 3 4; do
    run "$np" 60000 "$h5" --batch-size 64 --remainder mask --epochs 2
    run "$np" 60000 "$tfr" --format tfrecord --feature image:bytes/uint8:28x28 \
        --feature label:int64 --batch-size 50 --remainder pad
done
run 3 $((60000 / (3 * 64) * 3 * 64)) "$h5" --batch-size 64 --remainder drop --balance-steps

# Outside global sharding without staging: one ConfigError, the same on every rank.
for extra in "--sharding byte_range --shuffle local" "--sharding global --shuffle global --stage memory"; do
    set +e
    # shellcheck disable=SC2086
    timeout 60 "$mpiexec" -np 3 --oversubscribe "$cli" stage "$h5" --two-phase $extra \
        >"$work/err.out" 2>"$work/err.txt"
    rc=$?
    set -e
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$work/err.txt"; fail "--two-phase $extra: rc=$rc"; }
    n=$(grep -E -c "mpistage: rank [0-9]+: ConfigError: .*two-phase" "$work/err.txt" || true)
    [ "$n" -eq 3 ] || { cat "$work/err.txt"; fail "--two-phase $extra: expected the error on 3 ranks, got $n"; }
    [ "$(grep -E "mpistage: rank" "$work/err.txt" | sed 's/^mpistage: rank [0-9]*: //' | sort -u | wc -l)" -eq 1 ] \
        || { cat "$work/err.txt"; fail "--two-phase $extra: ranks report different errors"; }
done
echo "e2e stage_two_phase: OK"
