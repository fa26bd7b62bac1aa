#!/usr/bin/env bash
# End to end for two-phase reads (issue 9: `--two-phase on`, global shuffles without staging):
# Fashion-MNIST t10k (10,000 samples) as HDF5 and as TFRecord (tf.train.Example), staged with --verify at 1-4 ranks
# (exactly once, equal batches per rank), the JSON says two_phase, and --two-phase on outside
# global sharding without staging is the same ConfigError on every rank. Issue 21:
# `--two-phase auto` runs exactly once at 2 and 3 ranks and reports the mode asked, whether it
# chose two-phase reads and why (the same decision as its predicted step times say); outside
# global sharding it is off without measuring; `--two-phase maybe` is refused naming the flag.
# Usage: stage_two_phase.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
cli="$1"; work="$2"; fmnist="$4"
if [ ! -f "$fmnist/t10k-images-idx3-ubyte.gz" ]; then
    echo "SKIP: Fashion-MNIST not found in '$fmnist' (Debian package dataset-fashion-mnist)"
    exit 77
fi
mpiexec="${MPIEXEC:-mpirun}"
export MPISTAGE_ERRORS_ON_EVERY_RANK=1
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=../common/t10k_e2e.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/t10k_e2e.sh"
num_samples=10000

run() {  # run NP EXPECTED_VALID ARGS...: exit 0, exactly-once OK, equal batches, two-phase on
    mode_run on "$@"
}

mode_run() {  # mode_run MODE NP EXPECTED_VALID ARGS...: run with --two-phase MODE
    local mode="$1" np="$2" expected="$3"; shift 3
    local json="$work/report-$np.json" out
    out=$(timeout 300 "$mpiexec" -np "$np" --oversubscribe "$cli" stage "$@" --sharding global \
        --shuffle global --two-phase "$mode" --verify --json "$json") \
        || { echo "$out"; fail "-np $np $* exited non-zero"; }
    grep -q '^exactly-once: OK$' <<<"$out" || { echo "$out"; fail "-np $np $*: not exactly once"; }
    python3 - "$json" "$expected" "$mode" <<'PY' || fail "JSON check failed: -np $np $*"
import json, sys
r = json.load(open(sys.argv[1]))
t = r["stage"]["two_phase"]
assert t["option"] == sys.argv[3] and r["options"]["two_phase"] == sys.argv[3], t
if sys.argv[3] == "on":
    assert t["chosen"] is True and t["note"] == "", t
else:
    assert isinstance(t["chosen"], bool), t
    assert t["note"].startswith("two-phase auto: %s: " % ("on" if t["chosen"] else "off")), t
    assert t["plain_step_seconds"] > 0 and t["two_phase_step_seconds"] > 0, t
    assert t["chosen"] == (t["two_phase_step_seconds"] <= 0.8 * t["plain_step_seconds"]), t
    print("auto at %d ranks: %s" % (r["world_size"], t["note"]))
for e in r["epochs"]:
    assert len(set(e["batches_per_rank"])) == 1, e["batches_per_rank"]
    assert sum(e["valid_samples_per_rank"]) == int(sys.argv[2]), sum(e["valid_samples_per_rank"])
    assert e["duplicates"] == 0 and e["missing"] == 0, e
PY
}

for np in 1 2 3 4; do
    run "$np" "$num_samples" "$h5" --batch-size 64 --remainder mask --epochs 2
    run "$np" "$num_samples" "$tfr" --format tfrecord --feature image:bytes/uint8:28x28 \
        --feature label:int64 --batch-size 50 --remainder pad
done
run 3 $((num_samples / (3 * 64) * 3 * 64)) "$h5" --batch-size 64 --remainder drop --balance-steps
for np in 2 3; do
    mode_run auto "$np" "$num_samples" "$h5" --batch-size 64 --remainder mask --epochs 2
done

# auto outside global sharding: off without measuring, said in the report.
out=$(timeout 120 "$mpiexec" -np 2 --oversubscribe "$cli" stage "$h5" --two-phase auto \
    --sharding byte_range --shuffle local --verify --json "$work/auto-off.json") \
    || { echo "$out"; fail "--two-phase auto with byte_range sharding exited non-zero"; }
python3 - "$work/auto-off.json" <<'PY' || fail "auto with byte_range: JSON check"
import json, sys
t = json.load(open(sys.argv[1]))["stage"]["two_phase"]
assert t["option"] == "auto" and t["chosen"] is False, t
assert "off without measuring (sharding byte_range" in t["note"], t
PY

# Any other mode is refused by name.
set +e
"$cli" stage "$h5" --two-phase maybe >"$work/maybe.out" 2>&1
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "--two-phase maybe was accepted"
grep -F -q -- "--two-phase: 'maybe' is not one of off, on, auto" "$work/maybe.out" \
    || { cat "$work/maybe.out"; fail "--two-phase maybe: no error naming the flag and its modes"; }

# Outside global sharding without staging: one ConfigError, the same on every rank.
for extra in "--sharding byte_range --shuffle local" "--sharding global --shuffle global --stage memory"; do
    set +e
    # shellcheck disable=SC2086
    timeout 60 "$mpiexec" -np 3 --oversubscribe "$cli" stage "$h5" --two-phase on $extra \
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
