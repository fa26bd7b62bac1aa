#!/usr/bin/env bash
# End to end, issue "For PyTorch users" (launcher check): processes started without the MPI
# launcher are each an MPI world of one; with the job's task count in their environment
# (torchrun's WORLD_SIZE/RANK, Slurm's SLURM_NTASKS in a batch script run without srun) the CLI,
# a C++ program, refuses with a ConfigError naming both counts and the variable, in under 5 s,
# instead of reading the whole dataset in every process. MPISTAGE_ALLOW_SINGLETON=1 opts out.
# Usage: launcher_check.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
cli="$1"; work="$2"; fmnist="$4"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
# Nothing from a surrounding launcher or allocation leaks into the runs below.
clean=(env -u WORLD_SIZE -u LOCAL_WORLD_SIZE -u RANK -u LOCAL_RANK -u SLURM_NTASKS -u SLURM_NPROCS
       -u SLURM_STEP_NUM_TASKS -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_SIZE
       -u MV2_COMM_WORLD_SIZE -u MPISTAGE_ALLOW_SINGLETON)
h5="$work/t10k.h5"
[ -s "$h5" ] || "${clean[@]}" "$cli" convert idx "$fmnist/t10k-images-idx3-ubyte.gz" \
    "$fmnist/t10k-labels-idx1-ubyte.gz" -o "$h5" >/dev/null

# check_refused LOG EXIT_CODE SECONDS VARIABLE COUNT
check_refused() {
    local log="$1" rc="$2" secs="$3" var="$4" n="$5"
    [ "$rc" -eq 2 ] || { cat "$log" >&2; fail "exit $rc, expected 2 (ConfigError)"; }
    [ "$secs" -lt 5 ] || fail "the refusal took $secs s (bound: 5 s)"
    grep -q "ConfigError: .*MPI world of 1 rank, but $var=$n" "$log" || { cat "$log" >&2; fail "no ConfigError naming $var=$n"; }
    grep -q "mpirun -n $n" "$log" || fail "the message does not say how to launch"
    grep -q "exactly-once\|samples" "$log" && fail "data was staged"
    return 0
}

echo "== two processes as torchrun starts them (WORLD_SIZE=2, RANK=0 and 1), no MPI launcher"
start=$SECONDS
pids=()
for r in 0 1; do
    "${clean[@]}" WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 RANK=$r LOCAL_RANK=$r \
        MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \
        "$cli" stage "$h5" --batch-size 32 --epochs 1 >"$work/torchrun.$r.log" 2>&1 &
    pids+=($!)
done
for r in 0 1; do
    rc=0; wait "${pids[$r]}" || rc=$?
    check_refused "$work/torchrun.$r.log" "$rc" $((SECONDS - start)) WORLD_SIZE 2
done
cat "$work/torchrun.0.log"

echo "== a singleton inside an sbatch -n 2 script (SLURM_NTASKS=2), no srun"
start=$SECONDS
rc=0
"${clean[@]}" SLURM_NTASKS=2 SLURM_NPROCS=2 SLURM_JOB_ID=1 \
    "$cli" stage "$h5" --batch-size 32 --epochs 1 >"$work/slurm.log" 2>&1 || rc=$?
check_refused "$work/slurm.log" "$rc" $((SECONDS - start)) SLURM_NTASKS 2

echo "== the opt-out: MPISTAGE_ALLOW_SINGLETON=1 stages the whole dataset in one process"
"${clean[@]}" WORLD_SIZE=2 RANK=1 MPISTAGE_ALLOW_SINGLETON=1 \
    "$cli" stage "$h5" --batch-size 32 --epochs 1 --verify >"$work/optout.log" 2>&1 ||
    { cat "$work/optout.log" >&2; fail "the opt-out did not run"; }
grep -q "exactly-once: OK" "$work/optout.log" || fail "the opt-out run did not verify"

echo "== mpirun -n 1 inside an allocation of 4 tasks is intended: accepted"
"${clean[@]}" SLURM_NTASKS=4 "${MPIEXEC:-mpirun}" -n 1 "$cli" stage "$h5" --batch-size 32 \
    --epochs 1 --verify >"$work/mpirun1.log" 2>&1 || { cat "$work/mpirun1.log" >&2; fail "mpirun -n 1 refused"; }
grep -q "exactly-once: OK" "$work/mpirun1.log" || fail "mpirun -n 1 did not verify"
echo "launcher_check: OK"
