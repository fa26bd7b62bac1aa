#!/usr/bin/env bash
# One command for the side-by-side staging benchmark (benchmarks/README.md): prepares the
# workloads, runs benchmarks/side_by_side.py and bench_exchange (MPI_Get vs MPI_Alltoallv), and
# plots the steady-state rates with gnuplot, then benchmarks/contention.py. Results:
# OUT.md/.json/.dat/.png and OUT-contention.md/.json (OUT defaults to benchmarks/results;
# CONTENTION=0 skips contention.py). Then the Fashion-MNIST table under the parallel-file-system
# model (1 ms per request, 2 GB/s per process; OUT-pfs.md/.json; PFS=0 skips it, about 15
# minutes) and the scale model (OUT-scale.md: the table at W = 64 ... 4096, N = 10^9, and its
# check against real runs at W = 2, 3, 4). The side-by-side table runs with COLD=1 unless COLD=0
# is set: each method's files leave the page cache before its warm-up run, so each method reads
# them in itself (side_by_side.py; benchmarks/README.md, "Huge pages of the page cache").
#
#   benchmarks/run.sh [BUILD_DIR] [NP] [RUNS]      (defaults: build, 2, 5)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "${1:-build}" && pwd)"
np="${2:-2}"
runs="${3:-5}"
work="${WORK_DIR:-$build/bench-data}"
out="${OUT:-$here/results}"
py=/usr/bin/python3
mkdir -p "$work"
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "$np" -gt "$(nproc)" ]; then
    echo "run.sh: NP $np exceeds the $(nproc) cores; rates would measure oversubscription" >&2
    exit 2
fi
if ! command -v gnuplot > /dev/null; then
    apt-get install -y gnuplot-nox > /dev/null || echo "run.sh: no gnuplot; skipping the plot" >&2
fi

fm=/usr/share/datasets/fashion-mnist
[ -s "$work/fmnist.h5" ] || "$build/mpistage" convert idx "$fm/train-images-idx3-ubyte.gz" \
    "$fm/train-labels-idx1-ubyte.gz" -o "$work/fmnist.h5" > /dev/null
[ -s "$work/fmnist.tfrecord" ] || "$build/mpistage" convert idx --format tfrecord \
    "$fm/train-images-idx3-ubyte.gz" "$fm/train-labels-idx1-ubyte.gz" \
    -o "$work/fmnist.tfrecord" > /dev/null
[ -s "$work/resnet50.h5" ] || "$py" "$here/make_workload.py" "$work/resnet50.h5" 2000

echo "np=$np, $runs runs after a warm-up, $(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC')"
COLD="${COLD:-1}" "$py" "$here/side_by_side.py" "$build" "$work" "$np" "$runs" "$out"

# Under contention (README "Binding and shared cores"): staged Fashion-MNIST and PyTorch in
# memory, idle and with a busy process per core, default binding and --bind-to none.
# Results: $out-contention.md/.json. CONTENTION=0 skips it.
if [ "${CONTENTION:-1}" != 0 ]; then
    "$py" "$here/contention.py" "$build" "$work" "$np" "$runs" "$out-contention"
fi

# The memory tier's cross-node path: MPI_Get vs MPI_Alltoallv per step, every rank its own
# node (README "MPI_Get vs MPI_Alltoallv"); osc/sm excluded so that one-sided access goes
# through osc/rdma as it would between nodes. Its tables are appended to $out.md.
[ -x "$build/benchmarks/bench_exchange" ] || cmake --build "$build" --target bench_exchange
exchange() {
    mpirun -np "$np" --bind-to none --mca osc ^sm "$build/benchmarks/bench_exchange" \
        --reps "$runs" "$@"
}
{
    echo
    exchange
    echo
    exchange --samples 2000 --fields 150528,8 --batch 16
} | tee -a "$out.md"

# The parallel-file-system model (README "Parallel-file-system model"): every method of the
# Fashion-MNIST workload with each read delayed as on a parallel file system. Three epochs, one
# run, no warm-up: the unstaged shuffled methods take about a minute per epoch.
if [ "${PFS:-1}" != 0 ]; then
    cmake --build "$build" --target mpistage_pfs_model > /dev/null
    PFS_MODEL="$build/benchmarks/pfs/libmpistage_pfs_model.so" \
        MPISTAGE_PFS_LATENCY_US="${MPISTAGE_PFS_LATENCY_US:-1000}" \
        MPISTAGE_PFS_BANDWIDTH="${MPISTAGE_PFS_BANDWIDTH:-2e9}" MPISTAGE_PFS_ROOT="$work" \
        WORKLOADS=fmnist MAX_EPOCHS=3 WARMUP=0 COLD=0 \
        "$py" "$here/side_by_side.py" "$build" "$work" "$np" 1 "$out-pfs"
fi

# The scale model (README "Scale model"): formulas from the code, plan times from the real
# planner, collective counts checked against real runs (more ranks than cores: counts only).
cmake --build "$build" --target bench_scale_plan scale_count > /dev/null
"$py" "$here/scale_model.py" table "$build" "$out-scale.md" > /dev/null
for w in 2 3 4; do
    "$py" "$here/scale_model.py" check "$build" "$w" "$work/scale_check" | tail -1
done | tee -a "$out-scale.md"
echo "scale model: $out-scale.md"
if command -v gnuplot > /dev/null; then
    gnuplot <<GP
set terminal pngcairo size 1400,750 noenhanced
set output "$out-scale.png"
set multiplot layout 1,2 title "Scale model: N = 1e9, B = 64, P = 4, 4 ranks per node"
set logscale xy
set xrange [48:5500]
set xlabel "world size W"
set key below font ",9" maxrows 4
set ylabel "network bytes sent per rank per step (upper bound)"
plot for [i=2:13] "$out-scale.dat" index 0 using 1:i with linespoints title columnheader(i)
set ylabel "memory per rank (bytes)"
plot for [i=2:13] "$out-scale.dat" index 1 using 1:i with linespoints title columnheader(i)
unset multiplot
GP
    echo "plot: $out-scale.png"
fi

if command -v gnuplot > /dev/null; then
    gnuplot <<GP
set terminal pngcairo size 1200,800 noenhanced
set output "$out.png"
set title "Steady-state samples/s (median of $runs runs, np=$np), log scale"
set style data histogram
set style fill solid 0.8
set logscale y
set xtics rotate by -60 font ",8"
set key off
set ylabel "samples/s"
plot "$out.dat" using 2:xtic(1)
GP
    echo "plot: $out.png"
fi
