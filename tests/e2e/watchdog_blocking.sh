#!/usr/bin/env bash
# The watchdog covers blocking calls too (issue "Nothing silent", item 1): one rank is stopped
# (SIGSTOP) or killed (SIGKILL) on entering a blocking collective call by an LD_PRELOAD fault
# injector (tests/tools/fault_inject.c), and the job must end within --timeout + 30 s, with the
# watchdog's report for a stop, and no rank process left behind.
#   MPI_File_open            TFRecord open (the library's own MPI_File_open)
#   H5Fopen                  collective HDF5 open through the MPI-IO driver
#   MPI_Win_allocate_shared  the memory tier's window (--stage memory --stage-read copy)
#   pread (>= 1 MiB)         the independent staging read of a contiguous dataset into the
#                            window (--stage memory --stage-read copy)
#   madvise (>= 1 MiB)       the mapped staging read of a contiguous dataset (MADV_POPULATE_READ;
#                            --stage memory, mapped by default)
#   H5Dread                  the collective staging read of a chunked dataset (--stage memory)
#   MPI_File_read_at_all     inside HDF5's collective read (--stage memory, chunked)
# Usage: watchdog_blocking.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
# The injector library comes from $MPISTAGE_FAULT_INJECT (set by CMake); the set-up is shared
# with staging_truncated.sh (tests/common/fault_e2e.sh).
set -euo pipefail
# shellcheck source=../common/fault_e2e.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/fault_e2e.sh"
timeout_s=5
limit=$((timeout_s + 30))

# fault NAME CALL ACTION ARGS...: rank 1 of 3 meets ACTION on entering CALL.
fault() {
    local name="$1" call="$2" action="$3"; shift 3
    # A per-run tag in the arguments finds every process of this run afterwards.
    local tag="$work/run-$name"
    mkdir -p "$tag"
    local t0=$SECONDS rc=0
    set +e
    timeout -k 5 $((limit + 30)) "$mpiexec" -np 3 --oversubscribe -x LD_PRELOAD="$inject" \
        -x MPISTAGE_FAULT_CALL="$call" -x MPISTAGE_FAULT_RANK=1 \
        -x MPISTAGE_FAULT_ACTION="$action" -x MPISTAGE_FAULT_MIN_BYTES=$((1 << 20)) \
        "$cli" stage "$@" --timeout "$timeout_s" --quiet --json "$tag/report.json" \
        >"$work/out" 2>"$work/err"
    rc=$?
    set -e
    local took=$((SECONDS - t0))
    grep -q "fault_inject: world rank 1 .* on entering $call" "$work/err" \
        || { cat "$work/err"; fail "$name: the injector never met $call (the test does not test)"; }
    [ "$rc" -ne 0 ] || { cat "$work/err"; fail "$name: exit 0 with a rank ${action}ped"; }
    # (mpirun passes on a killed rank's status, 137, so only the time tells a hang.)
    [ "$took" -le "$limit" ] || { cat "$work/err"; fail "$name: took $took s > $limit s (hung)"; }
    if [ "$action" = stop ]; then
        grep -q "mpistage watchdog" "$work/err" \
            || { cat "$work/err"; fail "$name: no watchdog report"; }
    fi
    sleep 1
    if pgrep -f -- "$tag/report.json" >/dev/null; then
        pgrep -af -- "$tag/report.json" >&2
        pkill -9 -f -- "$tag/report.json" || true
        fail "$name: rank processes outlived the job"
    fi
    echo "PASS $name: rc=$rc in $took s; $(grep -m1 -o 'mpistage watchdog.\{0,140\}' "$work/err" || grep -m1 -i 'exited on signal\|killed' "$work/err" | cut -c1-140)"
}

fault tfrecord_open_stop MPI_File_open stop "$tfr"
fault hdf5_open_stop H5Fopen stop "$h5"
fault window_stop MPI_Win_allocate_shared stop "$h5" --stage memory --stage-read copy
# The staging read of a contiguous dataset is independent preads (issue 21); a chunked copy
# keeps the collective path (H5Dread, MPI_File_read_at_all) under test.
h5_chunked="$work/t10k-chunked.h5"
[ -s "$h5_chunked" ] || h5repack -l images:CHUNK=1000x28x28 -l labels:CHUNK=1000 "$h5" "$h5_chunked"
fault staging_pread_stop pread stop "$h5" --stage memory --stage-read copy
fault mapped_read_stop madvise stop "$h5" --stage memory
fault staging_read_stop H5Dread stop "$h5_chunked" --stage memory
fault mpiio_read_stop MPI_File_read_at_all stop "$h5_chunked" --stage memory
fault hdf5_open_kill H5Fopen kill "$h5"
fault window_kill MPI_Win_allocate_shared kill "$h5" --stage memory --stage-read copy
echo "watchdog_blocking: all passed"
