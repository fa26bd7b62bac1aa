#!/usr/bin/env bash
# End to end: convert Fashion-MNIST to HDF5, stage it with --verify at 1-4 ranks under several
# option sets, check the JSON report, and check that differing options fail on every rank.
# Usage: stage_fashion_mnist.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
cli="$1"; work="$2"; fmnist="$4"
mpiexec="${MPIEXEC:-mpirun}"
# Every rank prints its copy of an agreed error (by default only rank 0 prints it, see
# tests/e2e/cli_messages.sh), so the checks below see that all ranks got the same one.
export MPISTAGE_ERRORS_ON_EVERY_RANK=1
mkdir -p "$work"
h5="$work/train.h5"
h5c="$work/train-chunked.h5"
[ -s "$h5" ] || "$cli" convert idx "$fmnist/train-images-idx3-ubyte.gz" "$fmnist/train-labels-idx1-ubyte.gz" -o "$h5"
[ -s "$h5c" ] || "$cli" convert idx "$fmnist/train-images-idx3-ubyte.gz" "$fmnist/train-labels-idx1-ubyte.gz" \
    -o "$h5c" --chunk-rows 1000 --gzip 4

fail() { echo "FAIL: $*" >&2; exit 1; }

# Independent check of the converted file: h5dump row 12345 equals the IDX bytes of image
# 12345 (zcat is cut short by head, so no pipefail here).
set +o pipefail
want=$(zcat "$fmnist/train-images-idx3-ubyte.gz" | tail -c +$((16 + 12345 * 784 + 1)) | head -c 784 | od -An -v -tu1 | tr -s ' \n' ' ' | sed 's/^ //;s/ $//')
got=$(h5dump -d /images -s "12345,0,0" -c "1,28,28" -y -w 0 "$h5" | sed -n '/DATA {/,/}/p' | grep -v -e 'DATA {' -e '}' | tr -d ',' | tr -s ' \n' ' ' | sed 's/^ //;s/ $//')
set -o pipefail
[ -n "$want" ] && [ "$want" = "$got" ] || fail "converted image 12345 differs from the IDX bytes"

run() {  # run NP ARGS... ; checks exit 0 and exactly-once: OK and equal batch counts in the JSON
    local np="$1"; shift
    local json="$work/report-$np.json"
    local out
    out=$(timeout 300 "$mpiexec" -np "$np" --oversubscribe "$cli" stage "$@" --verify --json "$json") \
        || { echo "$out"; fail "stage -np $np $* exited non-zero"; }
    grep -q '^exactly-once: OK$' <<<"$out" || { echo "$out"; fail "no exactly-once: OK for -np $np $*"; }
    python3 - "$json" "$np" <<'PY' || fail "JSON report check failed for -np $np"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["world_size"] == int(sys.argv[2]), r["world_size"]
for e in r["epochs"]:
    b = e["batches_per_rank"]
    assert len(b) == r["world_size"] and len(set(b)) == 1, b
    assert e["duplicates"] == 0 and e["missing"] == 0, e
    total = sum(e["valid_samples_per_rank"])
    if r["remainder"] == "drop":
        assert total == b[0] * r["batch_size"] * r["world_size"], (total, b)
    else:
        assert total == r["num_samples"] == 60000, total
PY
}

for np in 1 2 3 4; do
    run "$np" "$h5" --epochs 2
    run "$np" "$h5" --field images --field labels --batch-size 7 --remainder mask --shuffle local --epochs 2
done
run 3 "$h5" --batch-size 13 --remainder pad --shuffle local --seed 7 --threads 2 --prefetch 3
run 4 "$h5" --batch-size 64 --sharding global --shuffle global --remainder mask --threads 0
run 3 "$h5c" --batch-size 33 --remainder mask --shuffle local --threads 2
if timeout 60 "$mpiexec" -np 2 --oversubscribe "$cli" stage "$fmnist/train-labels-idx1-ubyte.gz" \
        --format idx >/dev/null 2>"$work/gz.err"; then
    fail "a gzip-compressed IDX file must be refused"
fi
grep -q "FormatError: .*gzip-compressed" "$work/gz.err" || { cat "$work/gz.err"; fail "no gzip error"; }

# A different --batch-size on one rank: every rank exits non-zero with the same ConfigError, fast.
cat > "$work/wrap.sh" <<'SH'
#!/usr/bin/env bash
bs=32; [ "${OMPI_COMM_WORLD_RANK:-0}" = "2" ] && bs=16
exec "$@" --batch-size "$bs"
SH
chmod +x "$work/wrap.sh"
start=$(date +%s)
set +e
timeout 60 "$mpiexec" -np 3 --oversubscribe "$work/wrap.sh" "$cli" stage "$h5" >"$work/mismatch.out" 2>"$work/mismatch.err"
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "mismatched batch sizes: rc=$rc"
[ "$elapsed" -le 30 ] || fail "mismatched batch sizes took ${elapsed}s"
n=$(grep -c "ConfigError: stage: ranks were given different arguments: ranks disagree: --batch-size is '32' on rank 0 but '16' on rank 2" "$work/mismatch.err" || true)
[ "$n" -eq 3 ] || { cat "$work/mismatch.err"; fail "expected the same ConfigError on all 3 ranks, got $n"; }

# Other per-rank differences (found by review): a flag that changes the number of collectives
# (--epochs, --verify) and an input file missing on one rank. Same error everywhere, no hang.
cat > "$work/wrap2.sh" <<'SH'
#!/usr/bin/env bash
# wrap2.sh "RANK0 ARGS" "OTHER ARGS" CLI
if [ "${OMPI_COMM_WORLD_RANK:-0}" = "0" ]; then eval exec "$3" $1; else eval exec "$3" $2; fi
SH
chmod +x "$work/wrap2.sh"
for case in "stage $h5 -e 2 -q|stage $h5 -e 1 -q|--epochs is '2' on rank 0 but '1' on rank 1" \
            "stage $h5 --verify -q|stage $h5 -q|--verify is 'on' on rank 0 but 'off' on rank 1" \
            "stage $h5 -q|stage $work/missing.h5 -q|stage: FILE: '$work/missing.h5' does not exist"; do
    IFS='|' read -r a0 a1 pattern <<< "$case"
    start=$(date +%s)
    set +e
    timeout -k 5 60 "$mpiexec" -np 3 --oversubscribe "$work/wrap2.sh" "$a0" "$a1" "$cli" >/dev/null 2>"$work/diff.err"
    rc=$?
    set -e
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$work/diff.err"; fail "per-rank difference ($pattern): rc=$rc"; }
    [ $(( $(date +%s) - start )) -le 30 ] || fail "per-rank difference ($pattern) took more than 30 s"
    n=$(grep -c -F -e "$pattern" "$work/diff.err" || true)
    [ "$n" -eq 3 ] || { cat "$work/diff.err"; fail "expected '$pattern' on 3 ranks, got $n"; }
done

# Bad input: a file that is not HDF5 fails on every rank with the same message naming it.
printf 'not hdf5 at all' > "$work/bogus.h5"
set +e
timeout 60 "$mpiexec" -np 3 --oversubscribe "$cli" stage "$work/bogus.h5" --format hdf5 2>"$work/bogus.err"
rc=$?
set -e
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "non-HDF5 input: rc=$rc"
n=$(grep -c "FormatError: .*bogus.h5: not an HDF5 file" "$work/bogus.err" || true)
[ "$n" -eq 3 ] || { cat "$work/bogus.err"; fail "expected the FormatError on all 3 ranks, got $n"; }
echo "e2e stage_fashion_mnist: OK"
