#!/usr/bin/env bash
# Long stress run (label "stress", excluded by default; MPISTAGE_STRESS=1 scripts/test.sh):
# 200 pseudo-random option sets on Fashion-MNIST (HDF5 and TFRecord copies) at 1-4 ranks,
# 3 epochs each, every one checked with --verify (exactly once, equal batch counts).
# Usage: stress_stage.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR [RUNS]
set -euo pipefail
cli="$1"; work="$2"; fmnist="$4"; runs="${5:-200}"
mpiexec="${MPIEXEC:-mpirun}"
mkdir -p "$work"
[ -s "$work/train.h5" ] || "$cli" convert idx "$fmnist/train-images-idx3-ubyte.gz" \
    "$fmnist/train-labels-idx1-ubyte.gz" -o "$work/train.h5" >/dev/null
[ -s "$work/train.tfrecord" ] || "$cli" convert idx "$fmnist/train-images-idx3-ubyte.gz" \
    "$fmnist/train-labels-idx1-ubyte.gz" -o "$work/train.tfrecord" --format tfrecord >/dev/null
RANDOM=12345
remainders=(drop pad mask)
for i in $(seq 1 "$runs"); do
    np=$(( RANDOM % 4 + 1 ))
    b=$(( RANDOM % 300 + 1 ))
    rem=${remainders[$(( RANDOM % 3 ))]}
    if (( RANDOM % 2 )); then sharding=(--sharding global --shuffle global); else sharding=(--shuffle local); fi
    if (( RANDOM % 2 )); then file=("$work/train.h5"); else file=("$work/train.tfrecord" --feature image:bytes/uint8:28x28 --feature label:int64); fi
    threads=$(( RANDOM % 4 ))
    prefetch=$(( RANDOM % 6 + 1 ))
    args=("${file[@]}" -b "$b" --remainder "$rem" "${sharding[@]}" --threads "$threads"
          --prefetch "$prefetch" --seed "$i" --epochs 3 --first-epoch "$(( RANDOM % 100 ))" --verify -q)
    if ! timeout 300 "$mpiexec" -np "$np" --oversubscribe "$cli" stage "${args[@]}" >/dev/null 2>"$work/err"; then
        cat "$work/err"
        echo "FAIL run $i: -np $np ${args[*]}" >&2
        exit 1
    fi
done
echo "stress: $runs runs OK"
