#!/usr/bin/env bash
# ctest example.train_fashion_mnist: converts Fashion-MNIST (train and test) to HDF5, trains the
# example for one short epoch at 2 ranks, and checks that the loss of the last steps is below
# that of the first steps and that the whole 10,000-image test set was evaluated.
# Usage: check_train_fashion_mnist.sh MPISTAGE_CLI TRAINER WORK_DIR FASHION_MNIST_DIR
set -euo pipefail
cli="$1"; trainer="$2"; work="$3"; fmnist="$4"
mpiexec="${MPIEXEC:-mpirun}"
if [ ! -s "$fmnist/train-images-idx3-ubyte.gz" ] || [ ! -s "$fmnist/t10k-images-idx3-ubyte.gz" ]; then
    echo "SKIP: Fashion-MNIST not found in '$fmnist' (install Debian's dataset-fashion-mnist or" \
         "configure with -DMPISTAGE_FASHION_MNIST_DIR=DIR)"
    exit 77
fi
mkdir -p "$work"
[ -s "$work/train.h5" ] || "$cli" convert idx "$fmnist/train-images-idx3-ubyte.gz" \
    "$fmnist/train-labels-idx1-ubyte.gz" -o "$work/train.h5"
[ -s "$work/test.h5" ] || "$cli" convert idx "$fmnist/t10k-images-idx3-ubyte.gz" \
    "$fmnist/t10k-labels-idx1-ubyte.gz" -o "$work/test.h5"
out=$(timeout 500 "$mpiexec" -np 2 --oversubscribe "$trainer" "$work/train.h5" "$work/test.h5" \
    --epochs 1 --max-steps 120 --batch-size 64)
echo "$out"
line=$(echo "$out" | grep '^epoch 0: ') || { echo "FAIL: no 'epoch 0:' line"; exit 1; }
first=$(echo "$line" | sed -n 's/.*first steps \([0-9.]*\),.*/\1/p')
last=$(echo "$line" | sed -n 's/.*last steps \([0-9.]*\)).*/\1/p')
steps=$(echo "$line" | sed -n 's/.* \([0-9]*\) steps,.*/\1/p')
[ -n "$first" ] && [ -n "$last" ] || { echo "FAIL: no losses in '$line'"; exit 1; }
[ "$steps" = 120 ] || { echo "FAIL: expected 120 steps, got '$steps'"; exit 1; }
grep -q '(10000 images)' <<<"$line" || { echo "FAIL: test set not evaluated whole"; exit 1; }
python3 -c "import sys; f, l = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if l < 0.8 * f else 1)" \
    "$first" "$last" || { echo "FAIL: the loss did not fall: first steps $first, last steps $last"; exit 1; }
echo "example train_fashion_mnist: OK (loss $first -> $last)"
