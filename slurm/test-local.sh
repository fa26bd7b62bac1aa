#!/usr/bin/env bash
# Runs the Slurm jobs of this folder on a Slurm cluster reachable from this machine (typically a
# one-node test cluster on localhost) and checks their results:
#   1. slurm/stage.sbatch with a node-local copy (STAGE_DIR): `exactly-once: OK`
#   2. slurm/train.sbatch, one short epoch with a node-local copy: the loss falls and the whole
#      test set is evaluated; when the cluster has GPUs (gres "gpu", real or fake), every task
#      is bound to a different GPU of its node (CUDA_VISIBLE_DEVICES by node-local rank)
#   3. slurm/train_python.sbatch (when the build has the Python module), one epoch from Python
#      with a node-local copy: every rank its shard (the steps of 60000 / NTASKS samples), the
#      whole test set evaluated, test accuracy >= 70 %
#
#   slurm/test-local.sh [--build-dir DIR] [--work DIR] [--fashion-mnist DIR] [--ntasks N]
#                       [--starter SCRIPT]
#
# --build-dir: a build with the mpistage CLI and (for step 2) examples/example_train_fashion_mnist
# (default build-release). --work: where the data and the job outputs go (default: a new
# temporary folder). --fashion-mnist: Debian's dataset-fashion-mnist folder (default
# /usr/share/datasets/fashion-mnist). --ntasks: MPI ranks per job (default 2).
# Slurm: when no Slurm node is idle and a starter is given (--starter SCRIPT, or the environment
# variable MPISTAGE_SLURM_STARTER), `SCRIPT NTASKS` is run first to start a one-node cluster with
# NTASKS (fake) GPUs (it needs root). Without Slurm the test is skipped: exit 77.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$here/build-release"
work=""
fmnist=/usr/share/datasets/fashion-mnist
ntasks=2
starter="${MPISTAGE_SLURM_STARTER:-}"
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) build_dir="$2"; shift 2 ;;
        --work) work="$2"; shift 2 ;;
        --fashion-mnist) fmnist="$2"; shift 2 ;;
        --ntasks) ntasks="$2"; shift 2 ;;
        --starter) starter="$2"; shift 2 ;;
        *) echo "test-local.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
    esac
done
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
build_dir="$(realpath "$build_dir")"
[ -x "$build_dir/mpistage" ] || fail "no mpistage CLI in '$build_dir' (build it first)"
[ -s "$fmnist/train-images-idx3-ubyte.gz" ] || skip "Fashion-MNIST not found in '$fmnist'"

slurm_up() { command -v sbatch >/dev/null && sinfo -h -o %T 2>/dev/null | grep -E 'idle|mix' >/dev/null; }
if ! slurm_up; then
    [ -n "$starter" ] || skip "no Slurm node is idle and no starter was given (--starter SCRIPT or MPISTAGE_SLURM_STARTER)"
    [ -f "$starter" ] || fail "Slurm starter '$starter' does not exist"
    bash "$starter" "$ntasks" || fail "the Slurm starter '$starter' failed"
    slurm_up || fail "no idle Slurm node after running '$starter'"
fi
gpus=0
sinfo -h -o %G | grep 'gpu' >/dev/null && gpus=1

[ -n "$work" ] || work="$(mktemp -d)"
mkdir -p "$work/data"
work="$(realpath "$work")"
data="$work/data"
for set in train t10k; do
    name=$([ "$set" = train ] && echo train || echo test)
    [ -s "$data/fashion-mnist-$name.h5" ] || "$build_dir/mpistage" convert idx \
        "$fmnist/$set-images-idx3-ubyte.gz" "$fmnist/$set-labels-idx1-ubyte.gz" \
        -o "$data/fashion-mnist-$name.h5" >/dev/null
done
cd "$work"
export MPISTAGE_SOURCE_DIR="$here" BUILD_DIR="$build_dir" DATA_DIR="$data"
export STAGE_DIR="$work/node-local"

# submit SCRIPT [sbatch args...]: runs the job to its end; prints its output; sets $job_out.
submit() {
    local script="$1"; shift
    local id
    set +e
    # One CPU per task here (the jobs ask for 2: a rank and its I/O thread), so NTASKS tasks fit
    # a node of NTASKS cores; MPISTAGE_SLURM_CPUS_PER_TASK overrides it.
    id=$(timeout 900 sbatch --parsable --wait --ntasks="$ntasks" \
        --cpus-per-task="${MPISTAGE_SLURM_CPUS_PER_TASK:-1}" "$@" "$here/slurm/$script")
    local rc=$?
    set -e
    id="${id%%;*}"
    job_out=$(ls "$work"/mpistage-*-"$id".out 2>/dev/null | head -1)
    [ -n "$job_out" ] && cat "$job_out"
    [ "$rc" -eq 0 ] || fail "$script: job $id ended with exit code $rc"
}

echo "== stage job ($ntasks tasks, node-local copy)"
EPOCHS=2 submit stage.sbatch
grep -q '^exactly-once: OK$' "$job_out" || fail "stage job: no 'exactly-once: OK'"
grep -q "^node-local copy on .* -> $STAGE_DIR/mpistage-" "$job_out" || fail "stage job: no node-local copy"
# The EXIT trap removed the node-local copy (it also runs when the job fails).
if compgen -G "$STAGE_DIR/mpistage-*" >/dev/null; then fail "stage job: node-local copy left behind"; fi

if [ ! -x "$build_dir/examples/example_train_fashion_mnist" ]; then
    echo "slurm test-local: stage job OK; no trainer in $build_dir (built without libtorch)"
    exit 0
fi
echo "== train job ($ntasks tasks, one short epoch, GPUs: $gpus)"
gres=(--gpus-per-task=1)
[ "$gpus" = 1 ] || gres=(--gres=none --gpus-per-task=0)
EPOCHS=1 MAX_STEPS=60 DEVICE=cpu MPISTAGE_SHOW_BINDING=1 submit train.sbatch "${gres[@]}"
line=$(grep '^epoch 0: ' "$job_out") || fail "train job: no 'epoch 0:' line"
first=$(echo "$line" | sed -n 's/.*first steps \([0-9.]*\),.*/\1/p')
last=$(echo "$line" | sed -n 's/.*last steps \([0-9.]*\)).*/\1/p')
python3 -c "import sys; sys.exit(0 if float(sys.argv[2]) < float(sys.argv[1]) else 1)" \
    "$first" "$last" || fail "train job: the loss did not fall ($first -> $last)"
grep -q '(10000 images)' <<<"$line" || fail "train job: the test set was not evaluated whole"
if [ "$gpus" = 1 ]; then
    bound=$(grep -c '^binding: task' "$job_out" || true)
    distinct=$(grep '^binding: task' "$job_out" | sed 's/.*CUDA_VISIBLE_DEVICES=//' | sort -u | grep -v none | wc -l)
    [ "$bound" -eq "$ntasks" ] && [ "$distinct" -eq "$ntasks" ] \
        || fail "train job: $bound task(s) bound, $distinct distinct GPU(s); want $ntasks each"
fi
if [ -d "$build_dir/python/mpistage" ]; then
    echo "== Python train job ($ntasks tasks, one epoch, node-local copy)"
    EPOCHS=1 MIN_ACCURACY=70 submit train_python.sbatch
    line=$(grep '^epoch 0: ' "$job_out") || fail "Python train job: no 'epoch 0:' line"
    grep -q '(10000 images)' <<<"$line" || fail "Python train job: the test set was not evaluated whole"
    steps=$(sed -n 's/^epoch 0: \([0-9]*\) steps.*/\1/p' <<<"$line")
    # Equal steps on every rank, each rank its shard: ceil(60000 / ntasks / 64) with remainder mask.
    want=$(( (60000 / ntasks + 63) / 64 ))
    [ "$steps" -ge "$want" ] && [ "$steps" -le $((want + 1)) ] \
        || fail "Python train job: $steps steps, want about $want (60000 samples over $ntasks ranks)"
    if compgen -G "$STAGE_DIR/mpistage-*" >/dev/null; then fail "Python train job: node-local copy left behind"; fi
else
    echo "slurm test-local: no Python module in $build_dir/python (built without it): Python job not run"
fi
echo "slurm test-local: OK (stage, train and Python train jobs, $ntasks tasks; outputs in $work)"
