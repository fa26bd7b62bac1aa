#!/usr/bin/env bash
# --stage-read (issue 21): where the system refuses to map a file on one rank (the LD_PRELOAD
# injector, tests/tools/fault_inject.c, makes rank 1's mmap of the data file fail with ENODEV,
# as a FUSE direct_io mount does; other mappings, MPI's own, pass), `auto` (the default) copies on every rank, runs exactly once
# and says why in the report; `map` is the same ConfigError on every rank, naming the refusal;
# `copy` never maps. Without the fault, `auto` maps.
# Usage: stage_read_fallback.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
# shellcheck source=../common/fault_e2e.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/fault_e2e.sh"
py=/usr/bin/python3

run() {  # run NAME INJECT(0|1) ARGS...: stages $h5 at 2 ranks; rc in $rc, JSON in $work/NAME.json
    local name="$1" inject_it="$2"; shift 2
    local pre=()
    [ "$inject_it" = 1 ] && pre=(-x LD_PRELOAD="$inject" -x MPISTAGE_FAULT_CALL=mmap
        -x MPISTAGE_FAULT_RANK=1 -x MPISTAGE_FAULT_ACTION=enodev
        -x MPISTAGE_FAULT_FILE="$(readlink -f "$h5")")
    set +e
    timeout -k 5 120 "$mpiexec" -np 2 --oversubscribe "${pre[@]}" "$cli" stage "$h5" \
        --stage memory --verify --timeout 30 --device cpu --sharding global --shuffle global \
        --json "$work/$name.json" "$@" >"$work/$name.out" 2>"$work/$name.err"
    rc=$?
    set -e
}
field() {  # field NAME KEY: the report's stage.KEY
    "$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['stage'][sys.argv[2]])" \
        "$work/$1.json" "$2"
}

run plain 0
[ "$rc" -eq 0 ] || { cat "$work/plain.err"; fail "plain: rc=$rc"; }
[ "$(field plain read_method)" = mapped ] || fail "plain: auto did not map: $(field plain read_method)"
echo "PASS auto maps a contiguous HDF5 file"

run auto 1
grep -q "fault_inject: world rank 1 refused mmap" "$work/auto.err" \
    || { cat "$work/auto.err"; fail "auto: the injector never refused an mmap (the test does not test)"; }
[ "$rc" -eq 0 ] || { cat "$work/auto.out" "$work/auto.err"; fail "auto: rc=$rc, want 0 (copied)"; }
grep -q "exactly-once: OK" "$work/auto.out" || { cat "$work/auto.out"; fail "auto: no exactly-once: OK"; }
[ "$(field auto read_method)" = independent ] || fail "auto: read_method $(field auto read_method)"
note=$(field auto read_note)
for p in "[rank 1]" "mmap" "No such device" "copied"; do
    grep -F -q -e "$p" <<<"$note" || fail "auto: no '$p' in the note: $note"
done
echo "PASS auto copies when rank 1 cannot map: $note" | cut -c1-220

run map 1 --stage-read map
[ "$rc" -eq 2 ] || { cat "$work/map.out" "$work/map.err"; fail "map: rc=$rc, want 2 (an agreed error)"; }
[ "$(grep -c '^mpistage: ' "$work/map.err")" -eq 1 ] || { cat "$work/map.err"; fail "map: want one error line"; }
line=$(grep '^mpistage: ' "$work/map.err")
for p in "ConfigError" "stage_read map" "mmap" "No such device"; do
    grep -F -q -e "$p" <<<"$line" || { cat "$work/map.err"; fail "map: no '$p' in: $line"; }
done
echo "PASS map is refused by name: $line" | cut -c1-220

run copy 1 --stage-read copy
[ "$rc" -eq 0 ] || { cat "$work/copy.err"; fail "copy: rc=$rc"; }
grep -q "refused mmap" "$work/copy.err" && fail "copy: mapped the data file"
[ "$(field copy read_method)" = independent ] || fail "copy: read_method $(field copy read_method)"
echo "PASS copy never maps"
echo "stage_read_fallback: all passed"
