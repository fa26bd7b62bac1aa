#!/usr/bin/env bash
# ctest example.global_shuffle: the README's complete library example
# (examples/global_shuffle.cpp) at 2 ranks over Fashion-MNIST's test set converted to HDF5:
# a global shuffle with remainder mask counts each of the 10,000 images once per epoch.
# Usage: check_global_shuffle.sh MPISTAGE_CLI EXAMPLE WORK_DIR FASHION_MNIST_DIR
set -euo pipefail
cli="$1"; example="$2"; work="$3"; fmnist="$4"
mpiexec="${MPIEXEC:-mpirun}"
if [ ! -s "$fmnist/t10k-images-idx3-ubyte.gz" ]; then
    echo "SKIP: Fashion-MNIST not found in '$fmnist'"
    exit 77
fi
mkdir -p "$work"
[ -s "$work/test.h5" ] || "$cli" convert idx "$fmnist/t10k-images-idx3-ubyte.gz" \
    "$fmnist/t10k-labels-idx1-ubyte.gz" -o "$work/test.h5"
out=$(timeout 100 "$mpiexec" -np 2 --oversubscribe "$example" "$work/test.h5")
echo "$out"
[ "$out" = $'epoch 0: 10000 samples\nepoch 1: 10000 samples' ] ||
    { echo "FAIL: expected 10000 samples in each of 2 epochs, printed once (rank 0)" >&2; exit 1; }
echo "example global_shuffle: OK"
