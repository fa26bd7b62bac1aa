#!/usr/bin/env bash
# A file truncated during the memory tier's staging read fails on every rank (issue "Nothing
# silent", item 2): before, a collective HDF5 read returned zeros past the new end of file and
# the run printed "exactly-once: OK". The LD_PRELOAD injector (tests/tools/fault_inject.c) cuts
# the file to half its size when rank 0 enters a call of the staging read, so the truncation
# lands inside the read, for both ways of taking a shard in:
#   --stage-read copy  rank 0's first pread of at least 1 MiB, a piece of the read of its
#                      contiguous byte range into the window (issue 21: independent preads);
#   --stage-read map   rank 0's first madvise(MADV_POPULATE_READ) of at least 1 MiB, reading
#                      the pages of its rows of the mapped file in.
# Depending on where each rank's reads are when the file shrinks, a rank's pread ends early
# ("ended at offset", "truncated"), its read-in fails ("shorter than when it was opened"), or
# the check after the read sees the new size ("changed while it was read"); either way every
# rank reports the same IoError naming the file.
# Usage: staging_truncated.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
# shellcheck source=../common/fault_e2e.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/fault_e2e.sh"
size=$(stat -c %s "$h5")
for run in "copy pread 2" "copy pread 3" "map madvise 2" "map madvise 3"; do
    read -r method call np <<<"$run"
    cp "$h5" "$work/cut.h5"
    set +e
    timeout -k 5 120 "$mpiexec" -np "$np" --oversubscribe -x LD_PRELOAD="$inject" \
        -x MPISTAGE_FAULT_CALL="$call" -x MPISTAGE_FAULT_MIN_BYTES=$((1 << 20)) \
        -x MPISTAGE_FAULT_RANK=0 \
        -x MPISTAGE_FAULT_ACTION=truncate -x MPISTAGE_FAULT_FILE="$work/cut.h5" \
        -x MPISTAGE_FAULT_SIZE=$((size / 2)) \
        "$cli" stage "$work/cut.h5" --stage memory --stage-read "$method" --verify --timeout 30 \
        --device cpu \
        >"$work/out" 2>"$work/err"
    rc=$?
    set -e
    grep -q "fault_inject: world rank 0 truncated" "$work/err" \
        || { cat "$work/err"; fail "$method np $np: the file was never truncated (the test does not test)"; }
    [ "$rc" -eq 2 ] || { cat "$work/out" "$work/err"; fail "$method np $np: rc=$rc, want 2 (an agreed error)"; }
    grep -q "exactly-once: OK" "$work/out" && fail "$method np $np: exactly-once: OK from a truncated file"
    line=$(grep '^mpistage: ' "$work/err" || true)
    [ "$(grep -c '^mpistage: ' "$work/err")" -eq 1 ] || { cat "$work/err"; fail "$method np $np: want one error line"; }
    for p in "cut.h5" "IoError" "[rank "; do
        grep -F -e "$p" <<<"$line" >/dev/null || { cat "$work/err"; fail "$method np $np: no '$p' in: $line"; }
    done
    grep -E -e "changed while it was read \($size bytes at open|ended at offset|truncated: read|shorter than when it was opened" \
        <<<"$line" >/dev/null || { cat "$work/err"; fail "$method np $np: no truncation named in: $line"; }
    echo "PASS $method np $np: $line" | cut -c1-220
done
echo "staging_truncated: all passed"
