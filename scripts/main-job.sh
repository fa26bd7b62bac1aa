#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install what is missing, build Release (with
# libtorch required), convert Fashion-MNIST (Debian's dataset-fashion-mnist) to HDF5 and
# TFRecord, stage it on 4 MPI ranks for 2 epochs with --verify, then train the C++ example
# (examples/train_fashion_mnist.cpp) data-parallel on the same ranks, printing the test accuracy
# per epoch, and fail unless the final test accuracy reaches MIN_ACCURACY; then the same MLP from
# Python (examples/python/train_fashion_mnist.py: the mpistage module, PyTorch DDP over gloo),
# with the same threshold.
#
#   scripts/main-job.sh [extra `mpistage stage` flags]
#
# Environment: NP (ranks, default 4), BUILD_DIR (default build-release), DATA_DIR (default
# BUILD_DIR/data), MPIEXEC (default mpirun), FASHION_MNIST_DIR (default
# /usr/share/datasets/fashion-mnist), TRAIN_EPOCHS (default 3), MIN_ACCURACY (percent,
# default 85), PYTHON (default /usr/bin/python3, the interpreter the module is built for).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
np="${NP:-4}"
build_dir="${BUILD_DIR:-$here/build-release}"
data_dir="${DATA_DIR:-$build_dir/data}"
fmnist="${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"

# Debian's interpreter: install-deps.sh puts torch, mpi4py, numpy and pybind11 there.
python="${PYTHON:-/usr/bin/python3}"
"$here/scripts/install-deps.sh"
MPISTAGE_JOBS="${MPISTAGE_JOBS:-$(nproc)}" "$here/scripts/build.sh" "$build_dir" Release \
    -DMPISTAGE_BUILD_TESTS=OFF -DMPISTAGE_BUILD_BENCHMARKS=OFF -DMPISTAGE_BUILD_EXAMPLES=ON \
    -DMPISTAGE_WITH_TORCH=ON -DMPISTAGE_REQUIRE_TORCH=ON \
    -DMPISTAGE_WITH_PYTHON=ON -DMPISTAGE_REQUIRE_PYTHON=ON -DPython3_EXECUTABLE="$python"

if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
mkdir -p "$data_dir"
if [ ! -s "$data_dir/fashion-mnist-train.h5" ]; then
    "$build_dir/mpistage" convert idx "$fmnist/train-images-idx3-ubyte.gz" \
        "$fmnist/train-labels-idx1-ubyte.gz" -o "$data_dir/fashion-mnist-train.h5"
fi
if [ ! -s "$data_dir/fashion-mnist-test.h5" ]; then
    "$build_dir/mpistage" convert idx "$fmnist/t10k-images-idx3-ubyte.gz" \
        "$fmnist/t10k-labels-idx1-ubyte.gz" -o "$data_dir/fashion-mnist-test.h5"
fi
if [ ! -s "$data_dir/fashion-mnist-train.tfrecord" ]; then
    "$build_dir/mpistage" convert idx "$fmnist/train-images-idx3-ubyte.gz" \
        "$fmnist/train-labels-idx1-ubyte.gz" -o "$data_dir/fashion-mnist-train.tfrecord" \
        --format tfrecord
fi

echo "== HDF5: $data_dir/fashion-mnist-train.h5"
"${MPIEXEC:-mpirun}" -np "$np" --oversubscribe "$build_dir/mpistage" stage \
    "$data_dir/fashion-mnist-train.h5" --field images --field labels \
    --batch-size 64 --epochs 2 --shuffle local --remainder mask --prefetch 4 --threads 2 \
    --verify --json "$data_dir/stage-report.json" "$@"

echo "== TFRecord (tf.train.Example, split by byte ranges without an index): $data_dir/fashion-mnist-train.tfrecord"
"${MPIEXEC:-mpirun}" -np "$np" --oversubscribe "$build_dir/mpistage" stage \
    "$data_dir/fashion-mnist-train.tfrecord" --feature image:bytes/uint8:28x28 \
    --feature label:int64 --batch-size 64 --epochs 2 --shuffle local --remainder mask \
    --prefetch 4 --threads 2 --verify --json "$data_dir/stage-report-tfrecord.json" "$@"

echo "== Training (examples/train_fashion_mnist.cpp) on $np ranks: MLP, gradients averaged by MPI_Allreduce"
train_log="$data_dir/train.log"
"${MPIEXEC:-mpirun}" -np "$np" --oversubscribe "$build_dir/examples/example_train_fashion_mnist" \
    "$data_dir/fashion-mnist-train.h5" "$data_dir/fashion-mnist-test.h5" \
    --epochs "${TRAIN_EPOCHS:-3}" | tee "$train_log"
accuracy=$(sed -n 's/^final test accuracy: \([0-9.]*\)%$/\1/p' "$train_log")
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)" \
    "${accuracy:-0}" "${MIN_ACCURACY:-85}" \
    || { echo "main-job: test accuracy ${accuracy:-?}% is below ${MIN_ACCURACY:-85}%" >&2; exit 1; }

echo "== Training from Python (examples/python/train_fashion_mnist.py) on $np ranks: the same MLP, PyTorch DDP over gloo, batches from the mpistage module"
PYTHONPATH="$build_dir/python" "${MPIEXEC:-mpirun}" -np "$np" --oversubscribe "$python" \
    "$here/examples/python/train_fashion_mnist.py" "$data_dir/fashion-mnist-train.h5" \
    "$data_dir/fashion-mnist-test.h5" --epochs "${TRAIN_EPOCHS:-3}" \
    --min-accuracy "${MIN_ACCURACY:-85}" | tee "$data_dir/train-python.log"
py_accuracy=$(sed -n 's/^epoch .*test accuracy \([0-9.]*\) %.*$/\1/p' "$data_dir/train-python.log" | tail -1)
echo "main-job: OK (test accuracy $accuracy% from C++, ${py_accuracy:-?}% from Python, at $np ranks)"
