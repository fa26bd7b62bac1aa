#!/usr/bin/env bash
# The watchdog covers setup and teardown too (issue "The last silent edges", acceptance 1): rank
# 0 or the last rank of 2 and of 3 is stopped (SIGSTOP) by the LD_PRELOAD fault injector
# (tests/tools/fault_inject.c) on entering a call that waits for the other ranks:
#   MPI_Comm_dup                       the communicator's construction (the CLI's first)
#   MPI_Comm_split_type                the node split, made only where the node is needed
#                                      (issue 38): here the memory tier's (--stage memory)
#   MPI_Win_free                       the memory tier's window at teardown (--stage-read copy)
#   MPI_File_close                     the TFRecord source's MPI-IO files at teardown
#   H5Fclose                           the last close of the HDF5 file (collective, MPI-IO)
#   MPI_Finalize                       the end of the run
# Every run must end with exit code 70 and the watchdog's line within --timeout + 15 s, and no
# rank process may outlive the job.
# Usage: watchdog_teardown.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
# shellcheck source=../common/fault_e2e.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/fault_e2e.sh"
timeout_s=3
limit=$((timeout_s + 15))

# stall NP VICTIM CALL ARGS...: world rank VICTIM of NP is stopped on entering CALL.
stall() {
    local np="$1" victim="$2" call="$3"; shift 3
    local name="${call}_np${np}_rank${victim}"
    local tag="$work/run-$name"   # a per-run tag in the arguments finds its processes
    mkdir -p "$tag"
    local t0=$SECONDS rc=0
    set +e
    timeout -k 5 $((limit + 30)) "$mpiexec" -np "$np" --oversubscribe -x LD_PRELOAD="$inject" \
        -x MPISTAGE_FAULT_CALL="$call" -x MPISTAGE_FAULT_RANK="$victim" \
        "$cli" stage "$@" --timeout "$timeout_s" --quiet --json "$tag/report.json" \
        >"$work/out" 2>"$work/err"
    rc=$?
    set -e
    local took=$((SECONDS - t0))
    grep -q "fault_inject: world rank $victim stopped on entering $call" "$work/err" \
        || { cat "$work/err"; fail "$name: the injector never met $call (the test does not test)"; }
    [ "$took" -le "$limit" ] || { cat "$work/err"; fail "$name: took $took s > $limit s (hung)"; }
    [ "$rc" -eq 70 ] || { cat "$work/err"; fail "$name: exit $rc, expected 70 (the watchdog)"; }
    grep -q "mpistage watchdog: .*$call" "$work/err" \
        || { cat "$work/err"; fail "$name: no watchdog line naming $call"; }
    sleep 1
    if pgrep -f -- "$tag/report.json" >/dev/null; then
        pgrep -af -- "$tag/report.json" >&2
        pkill -CONT -f -- "$tag/report.json" || true
        pkill -9 -f -- "$tag/report.json" || true
        fail "$name: rank processes outlived the job"
    fi
    echo "PASS $name: exit $rc in $took s; $(grep -m1 -o 'mpistage watchdog.\{0,120\}' "$work/err")"
}

# Each call at 2 ranks with the last rank stopped and at 3 ranks with rank 0 stopped (12 runs,
# about a minute): every call, both sizes and both ends of the world. The whole matrix (each call
# at 2 and 3 ranks with rank 0 and with the last rank stopped, 24 runs) with MPISTAGE_STRESS=1.
# The waiting ranks poll inside MPI for the whole --timeout, so every run costs CPU that the
# rest of the suite (and scripts/test.sh's sanitizer build beside it) would otherwise use.
cases=("2 1" "3 0")
[ "${MPISTAGE_STRESS:-0}" = "1" ] && cases=("2 0" "2 1" "3 0" "3 2")
for c in "${cases[@]}"; do
    read -r np victim <<<"$c"
    stall "$np" "$victim" MPI_Comm_dup "$h5" --epochs 1
    stall "$np" "$victim" MPI_Comm_split_type "$h5" --epochs 1 --stage memory
    stall "$np" "$victim" MPI_Win_free "$h5" --epochs 1 --stage memory --stage-read copy
    stall "$np" "$victim" MPI_File_close "$tfr" --epochs 1
    stall "$np" "$victim" H5Fclose "$h5" --epochs 1
    stall "$np" "$victim" MPI_Finalize "$h5" --epochs 1
done
echo "watchdog_teardown: all passed"
