#!/usr/bin/env bash
# ctest example.first_batch: the README's first example (examples/first_batch.cpp) at 2 ranks
# over Fashion-MNIST's test set converted to HDF5: every rank prints its first batch, 32 samples
# of `images` (uint8 28x28: 25088 bytes) and `labels` (uint8: 32 bytes), and exits 0.
# Usage: check_first_batch.sh MPISTAGE_CLI EXAMPLE WORK_DIR FASHION_MNIST_DIR
set -euo pipefail
cli="$1"; example="$2"; work="$3"; fmnist="$4"
mpiexec="${MPIEXEC:-mpirun}"
if [ ! -s "$fmnist/t10k-images-idx3-ubyte.gz" ]; then
    echo "SKIP: Fashion-MNIST not found in '$fmnist' (install Debian's dataset-fashion-mnist or" \
         "configure with -DMPISTAGE_FASHION_MNIST_DIR=DIR)"
    exit 77
fi
mkdir -p "$work"
[ -s "$work/test.h5" ] || "$cli" convert idx "$fmnist/t10k-images-idx3-ubyte.gz" \
    "$fmnist/t10k-labels-idx1-ubyte.gz" -o "$work/test.h5"
out=$(timeout 100 "$mpiexec" -np 2 --oversubscribe "$example" "$work/test.h5")
echo "$out"
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(grep -cxF 'batch 0: 32 samples, images: 25088 bytes' <<<"$out")" = 2 ] ||
    fail "expected one 'images: 25088 bytes' line from each of the 2 ranks"
[ "$(grep -cxF 'batch 0: 32 samples, labels: 32 bytes' <<<"$out")" = 2 ] ||
    fail "expected one 'labels: 32 bytes' line from each of the 2 ranks"
[ "$(grep -c . <<<"$out")" = 4 ] || fail "expected exactly 4 lines of output"
echo "example first_batch: OK"
