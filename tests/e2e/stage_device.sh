#!/usr/bin/env bash
# End to end: `mpistage stage --device` at 3 ranks on one node. Without a usable GPU, auto
# stages on the CPU and says so in exactly one line (per node); cpu says nothing; an explicit
# CUDA device fails on every rank. With a GPU, auto puts every rank on a CUDA device.
# Usage: stage_device.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
cli="$1"; work="$2"; data="$3"
mpiexec="${MPIEXEC:-mpirun}"
h5="$data/hdf5/chunked.hdf5"
[ -s "$h5" ] || { echo "skipped: $h5 is absent"; exit 77; }
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
stage() {  # stage NAME ARGS...: stdout to NAME.out, stderr to NAME.err; returns the exit code
    local name="$1"; shift
    timeout 120 "$mpiexec" -np 3 --oversubscribe "$cli" stage "$h5" -b 4 --verify "$@" \
        >"$work/$name.out" 2>"$work/$name.err"
}
line='device auto: no usable CUDA device'

stage auto --device auto || { cat "$work/auto.out" "$work/auto.err"; fail "--device auto exited non-zero"; }
grep -q '^exactly-once: OK$' "$work/auto.out" || fail "--device auto: no exactly-once: OK"
rows=$(awk '$1 ~ /^[0-9]+$/ && NF == 11' "$work/auto.out")
[ "$(echo "$rows" | wc -l)" = 3 ] || { cat "$work/auto.out"; fail "expected 3 rank rows with device and H2D columns"; }
fallback=$(grep -c "$line" "$work/auto.err" || true)
if [ "$fallback" = 0 ]; then
    # A usable GPU: every rank staged to a CUDA device and measured the copies.
    echo "$rows" | awk '$10 !~ /^cuda:[0-9]+$/ || $11 == "-" { exit 1 }' \
        || { cat "$work/auto.out"; fail "no fallback line, but a rank is not on a CUDA device"; }
    echo "a CUDA device is usable: auto staged on it"
    exit 0
fi
[ "$fallback" = 1 ] || { cat "$work/auto.err"; fail "the CPU fallback line was printed $fallback times, not once"; }
grep "$line" "$work/auto.err" | grep 'staging batches on the CPU' >/dev/null || fail "the line does not say the CPU is used"
echo "$rows" | awk '$10 != "cpu" || $11 != "-" { exit 1 }' \
    || { cat "$work/auto.out"; fail "the table does not show cpu and no H2D rate on every rank"; }

stage cpu --device cpu || fail "--device cpu exited non-zero"
! grep -q "$line" "$work/cpu.err" || fail "--device cpu printed the fallback line"

if stage cuda --device cuda:0; then fail "--device cuda:0 succeeded without a usable device"; fi
[ "$(grep -c 'ConfigError.*device: cuda:0 was asked but no CUDA device is usable' "$work/cuda.err")" -ge 1 ] \
    || { cat "$work/cuda.err"; fail "--device cuda:0 did not fail with the reason"; }
echo "no usable CUDA device: auto fell back to the CPU with one line; cpu silent; cuda:0 refused"
