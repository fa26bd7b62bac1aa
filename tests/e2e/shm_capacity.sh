#!/usr/bin/env bash
# A node-shared window larger than the free space of the file system that backs it (issue "The
# last silent edges", acceptance 2): before the check, Open MPI printed a warning, one rank never
# returned from MPI_Win_allocate_shared, and the job waited its whole --timeout to exit 70 with
# the watchdog blaming "a rank ... did not enter it (stopped, killed, or elsewhere)". Now every
# rank ends at once with the same ConfigError naming the window's bytes, the free bytes and the
# directory. The backing directory is a small tmpfs mounted here (as root) and given to Open MPI
# with OMPI_MCA_osc_sm_backing_directory, exactly as a node whose /dev/shm is too small.
#   1. the memory tier's window of t10k.h5 (7.9 MB) in a 1 MiB tmpfs, at 2 and 3 ranks;
#   2. the TFRecord source's record descriptors (16 B x 10000 records) in a 64 KiB tmpfs;
#   3. controls: --stage-read map in the 1 MiB tmpfs (no window: the advice works), and the
#      window in a 32 MiB tmpfs (a window that fits is not refused), both exactly once.
# Skipped (77) where tmpfs cannot be mounted (not root, or a container without CAP_SYS_ADMIN).
# Usage: shm_capacity.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
# shellcheck source=../common/fault_e2e.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/fault_e2e.sh"

mounts=()
cleanup() { for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || true; done; }
trap cleanup EXIT
# small_shm NAME SIZE: a tmpfs of SIZE at $work/NAME; exits 77 when mounting is not allowed.
small_shm() {
    local dir="$work/$1"
    mkdir -p "$dir"
    umount "$dir" 2>/dev/null || true
    if ! mount -t tmpfs -o "size=$2" tmpfs "$dir" 2>"$work/mount.err"; then
        echo "SKIP: cannot mount a tmpfs of $2 at $dir ($(cat "$work/mount.err")); needs root" \
             "with CAP_SYS_ADMIN"
        exit 77
    fi
    mounts+=("$dir")
}
small_shm shm1m 1m
small_shm shm64k 64k
small_shm shm32m 32m

# refused NAME NP DIR PATTERN ARGS...: the run exits 2 within 10 s with one agreed ConfigError
# line that contains PATTERN, both sizes and DIR.
refused() {
    local name="$1" np="$2" dir="$3" pattern="$4"; shift 4
    local t0=$SECONDS rc=0
    set +e
    timeout -k 5 60 "$mpiexec" -np "$np" --oversubscribe -x OMPI_MCA_osc_sm_backing_directory="$dir" \
        "$cli" stage "$@" --epochs 1 --device cpu --timeout 60 >"$work/out" 2>"$work/err"
    rc=$?
    set -e
    local took=$((SECONDS - t0))
    [ "$rc" -eq 2 ] || { cat "$work/out" "$work/err"; fail "$name: exit $rc, want 2 (ConfigError)"; }
    [ "$took" -le 10 ] || fail "$name: took $took s, want the error within 10 s"
    [ "$(grep -c '^mpistage: ' "$work/err")" -eq 1 ] || { cat "$work/err"; fail "$name: want one error line"; }
    local line
    line=$(grep '^mpistage: ' "$work/err")
    for p in "ConfigError" "[rank 0 and $((np - 1)) other rank(s)]" "$pattern" \
             "window needs " "bytes free" "$dir has "; do
        grep -F -e "$p" <<<"$line" >/dev/null || fail "$name: no '$p' in: $line"
    done
    # Both sizes as numbers: the window's bytes above the free bytes.
    local need free
    need=$(sed -n 's/.*window needs \([0-9]*\) bytes.*/\1/p' <<<"$line")
    free=$(sed -n 's/.* has \([0-9]*\) bytes free.*/\1/p' <<<"$line")
    [ -n "$need" ] && [ -n "$free" ] && [ "$need" -gt "$free" ] \
        || fail "$name: sizes '$need' and '$free' in: $line"
    grep -q "watchdog" "$work/err" && { cat "$work/err"; fail "$name: the watchdog fired"; }
    echo "PASS $name: exit 2 in $took s: $(cut -c1-200 <<<"$line")"
}

for np in 2 3; do
    refused "tier np$np" "$np" "$work/shm1m" "memory tier (fixed fields)" \
        "$h5" --stage memory --stage-read copy
done
refused "tfrecord descriptors np2" 2 "$work/shm64k" "tfrecord: the descriptors of 10000 records" \
    "$tfr"

# ok NAME DIR ARGS...: exactly once at 2 ranks with the backing directory DIR.
ok() {
    local name="$1" dir="$2"; shift 2
    timeout -k 5 120 "$mpiexec" -np 2 --oversubscribe -x OMPI_MCA_osc_sm_backing_directory="$dir" \
        "$cli" stage "$@" --epochs 1 --device cpu --verify --timeout 60 >"$work/out" 2>"$work/err" \
        || { cat "$work/out" "$work/err"; fail "$name: failed"; }
    grep -q "^exactly-once: OK$" "$work/out" || { cat "$work/out"; fail "$name: no exactly-once: OK"; }
    echo "PASS $name"
}
ok "mapped tier beside a 1 MiB backing directory" "$work/shm1m" "$h5" --stage memory --stage-read map
ok "window that fits a 32 MiB backing directory" "$work/shm32m" "$h5" --stage memory --stage-read copy
echo "shm_capacity: all passed"
