#!/usr/bin/env bash
# A same-size edit of the file during the memory tier's copy-mode staging read fails on every
# rank (issue "The last silent edges"): the source's unchanged-file check hashes the size and
# the first and last 64 KiB only, so 4096 bytes rewritten in the middle were served, "6 wrong
# samples per epoch, exactly-once: OK". The staging read now stamps the files (size,
# modification and status-change times) before it and compares after it, as the mapped staging
# does. The LD_PRELOAD injector (tests/tools/fault_inject.c, action rewrite) inverts 4096
# bytes in the middle of the file, keeping its size, when rank 0 enters its first pread of at
# least 1 MiB (a piece of the copy of its byte range into the window).
# Usage: staging_rewritten.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
# shellcheck source=../common/fault_e2e.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/fault_e2e.sh"
size=$(stat -c %s "$h5")
for np in 2 3; do
    cp "$h5" "$work/edit.h5"
    set +e
    timeout -k 5 120 "$mpiexec" -np "$np" --oversubscribe -x LD_PRELOAD="$inject" \
        -x MPISTAGE_FAULT_CALL=pread -x MPISTAGE_FAULT_MIN_BYTES=$((1 << 20)) \
        -x MPISTAGE_FAULT_RANK=0 \
        -x MPISTAGE_FAULT_ACTION=rewrite -x MPISTAGE_FAULT_FILE="$work/edit.h5" \
        -x MPISTAGE_FAULT_SIZE=$((size / 2)) \
        "$cli" stage "$work/edit.h5" --stage memory --stage-read copy --verify --timeout 30 \
        --device cpu \
        >"$work/out" 2>"$work/err"
    rc=$?
    set -e
    grep -q "fault_inject: world rank 0 rewrote 4096 bytes of $work/edit.h5 at offset $((size / 2)) on entering pread$" "$work/err" \
        || { cat "$work/err"; fail "np $np: the file was never rewritten (the test does not test)"; }
    [ "$(stat -c %s "$work/edit.h5")" -eq "$size" ] || fail "np $np: the edit changed the size"
    cmp -s "$h5" "$work/edit.h5" && fail "np $np: the file's bytes did not change"
    [ "$rc" -eq 2 ] || { cat "$work/out" "$work/err"; fail "np $np: rc=$rc, want 2 (an agreed error)"; }
    grep -q "exactly-once: OK" "$work/out" && fail "np $np: exactly-once: OK from a rewritten file"
    [ "$(grep -c '^mpistage: ' "$work/err")" -eq 1 ] || { cat "$work/err"; fail "np $np: want one error line"; }
    line=$(grep '^mpistage: ' "$work/err")
    for p in "IoError" "edit.h5 changed while it was staged" "nothing is served from it"; do
        grep -F -e "$p" <<<"$line" >/dev/null || { cat "$work/err"; fail "np $np: no '$p' in: $line"; }
    done
    # Agreed: the error names every rank (rank 0 and the np-1 others), not only rank 0.
    grep -F -e "[rank 0 and $((np - 1)) other rank(s)]" <<<"$line" >/dev/null \
        || { cat "$work/err"; fail "np $np: not every rank reported it: $line"; }
    echo "PASS copy np $np: $line" | cut -c1-240
done
# Control: the same run without the edit stages and verifies.
timeout -k 5 120 "$mpiexec" -np 3 --oversubscribe "$cli" stage "$h5" --stage memory \
    --stage-read copy --verify --timeout 30 --device cpu >"$work/out" 2>"$work/err" \
    || { cat "$work/err"; fail "control run failed"; }
grep -q "^exactly-once: OK$" "$work/out" || { cat "$work/out"; fail "control: no exactly-once: OK"; }
echo "staging_rewritten: all passed"
