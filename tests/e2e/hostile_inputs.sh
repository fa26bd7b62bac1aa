#!/usr/bin/env bash
# Collective safety of the CLI (issue "Collective safety"): hostile inputs and arguments must end
# EVERY rank with a clear error within 30 s, exit non-zero and not by a signal, at 1 and 3 ranks;
# where the error is agreed, every rank prints the same message.
#   1. the same path names an HDF5 file on some ranks and a TFRecord on another (per-rank
#      directories: `in_rank_dir.sh` runs each rank in DIR/rankR, so the relative path
#      `data.tfrecord` is a different symlink on each rank)
#   2. a FIFO as FILE (every format), as --index, for `index` and `convert idx`, and on one rank
#   3. --json on a failed run: an atomic report with "status": "error" and the agreed message
#   4. negative values for unsigned flags (on every rank, and on one rank only)
#   5. permission denied is not "does not exist" (as user nobody when run as root)
#   6. --timeout and --verify-files take part in the argument agreement; wait_io/wait_peers
#      are reported
# Usage: hostile_inputs.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
cli="$(readlink -f "$1")"; work="$2"; data="${MPISTAGE_TEST_DATA_DIR:-$3}"; fmnist="$4"
if [ ! -f "$data/SOURCES.md" ]; then
    echo "SKIP: shared test data not found in '$data': set MPISTAGE_TEST_DATA_DIR to the directory that holds SOURCES.md"
    exit 77
fi
mpiexec="${MPIEXEC:-mpirun}"
# Every rank prints its copy of an agreed error (by default only rank 0 prints it, see
# tests/e2e/cli_messages.sh), so the checks below see that all ranks got the same one.
export MPISTAGE_ERRORS_ON_EVERY_RANK=1
[ -d "$work" ] && chmod -R u+rwx "$work" 2>/dev/null || true  # a failed run may leave a mode-000 folder
rm -rf "$work"
mkdir -p "$work"
work="$(readlink -f "$work")"
fail() { echo "FAIL: $*" >&2; exit 1; }
tfr="$data/tfrecord/roboflow_37.tfrecord"
h5="$work/t10k.h5"
"$cli" convert idx "$fmnist/t10k-images-idx3-ubyte.gz" "$fmnist/t10k-labels-idx1-ubyte.gz" \
    -o "$h5" >/dev/null

# run_case NP ARGS...: runs ARGS under mpiexec with a 30 s limit; sets rc, elapsed, $work/case.err
run_case() {
    local np="$1"; shift
    local start
    start=$(date +%s.%N)
    set +e
    timeout -k 5 30 "$mpiexec" -np "$np" --oversubscribe "$@" >"$work/case.out" 2>"$work/case.err"
    rc=$?
    set -e
    elapsed=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" \
        "$start" "$(date +%s.%N)")
}

# expect_error NAME NP PATTERN ARGS...: non-zero exit, no signal, no timeout; PATTERN (fixed
# string) in an error line of every rank; every rank prints the same error line.
expect_error() {
    local name="$1" np="$2" pattern="$3"; shift 3
    run_case "$np" "$@"
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$rc" -ge 128 ]; then
        cat "$work/case.err"; fail "$name (np $np): rc=$rc after ${elapsed}s (want an error exit)"
    fi
    local n
    n=$(grep -E '^mpistage: rank [0-9]+: [A-Za-z]+: ' "$work/case.err" | grep -c -F -e "$pattern" || true)
    [ "$n" -eq "$np" ] || { cat "$work/case.err"; fail "$name (np $np): '$pattern' on $n of $np ranks"; }
    [ "$(grep -E '^mpistage: rank [0-9]+: ' "$work/case.err" | sed 's/^mpistage: rank [0-9]*: //' | sort -u | wc -l)" -eq 1 ] \
        || { cat "$work/case.err"; fail "$name (np $np): ranks report different errors"; }
    echo "PASS $name np=$np rc=$rc ${elapsed}s: $(grep -m1 -E '^mpistage: rank 0: ' "$work/case.err" | cut -c1-200)"
}

expect_ok() {  # expect_ok NAME NP ARGS...
    local name="$1" np="$2"; shift 2
    run_case "$np" "$@"
    [ "$rc" -eq 0 ] || { cat "$work/case.err"; fail "$name (np $np): rc=$rc"; }
    echo "PASS $name np=$np rc=0 ${elapsed}s"
}

# Per-rank directories: in_rank_dir.sh DIR CMD... runs CMD in DIR/rankR (R = this MPI rank).
cat > "$work/in_rank_dir.sh" <<'SH'
#!/usr/bin/env bash
cd "$1/rank${OMPI_COMM_WORLD_RANK:-0}" || exit 97
shift
exec "$@"
SH
chmod +x "$work/in_rank_dir.sh"
# rank_dirs DIR NAME LAST OTHER: DIR/rank0..3/NAME links to OTHER, except on rank LASTRANK
# (given as "R:TARGET" in LAST), which links to TARGET.
rank_dirs() {
    local dir="$1" name="$2" last="$3" other="$4" r
    for r in 0 1 2 3; do
        mkdir -p "$dir/rank$r"
        rm -f "$dir/rank$r/$name"
        if [ "$r" = "${last%%:*}" ]; then ln -s "${last#*:}" "$dir/rank$r/$name"
        else ln -s "$other" "$dir/rank$r/$name"; fi
    done
}

# Per-rank arguments: per_rank_args.sh R "ARGS OF RANK R" "ARGS OF THE OTHERS" CMD...
cat > "$work/per_rank_args.sh" <<'SH'
#!/usr/bin/env bash
r="$1"; mine="$2"; others="$3"; shift 3
if [ "${OMPI_COMM_WORLD_RANK:-0}" = "$r" ]; then eval exec '"$@"' "$mine"; else eval exec '"$@"' "$others"; fi
SH
chmod +x "$work/per_rank_args.sh"

echo "== 1. one path, HDF5 on some ranks and TFRecord on the last"
for np in 2 3; do
    rank_dirs "$work/fmt$np" data.tfrecord "$((np - 1)):$tfr" "$h5"
    expect_error "format differs per rank" "$np" \
        "stage: ranks disagree: the source type (--format auto, FILE 'data.tfrecord') is 'hdf5' on rank 0 but 'tfrecord' on rank $((np - 1))" \
        "$work/in_rank_dir.sh" "$work/fmt$np" "$cli" stage data.tfrecord -q
done
# At 1 rank there is no other rank to disagree with: rank 0's view (HDF5 named .tfrecord) stages.
rank_dirs "$work/fmt1" data.tfrecord "9:$tfr" "$h5"
expect_ok "format per rank, 1 rank (control)" 1 "$work/in_rank_dir.sh" "$work/fmt1" "$cli" stage data.tfrecord -q

echo "== 2. FIFOs"
mkfifo "$work/pipe.h5" "$work/pipe.tfrecord" "$work/pipe-idx3-ubyte" "$work/pipe.idx"
fifo="is a FIFO (named pipe); only regular files and block devices can be staged"
for np in 1 3; do
    expect_error "FIFO, --format auto (.h5)" "$np" "stage: FILE: '$work/pipe.h5' $fifo" "$cli" stage "$work/pipe.h5"
    expect_error "FIFO, --format hdf5" "$np" "stage: FILE: '$work/pipe.h5' $fifo" "$cli" stage "$work/pipe.h5" --format hdf5
    expect_error "FIFO, --format tfrecord" "$np" "stage: FILE: '$work/pipe.tfrecord' $fifo" "$cli" stage "$work/pipe.tfrecord"
    expect_error "FIFO, --format idx" "$np" "stage: FILE: '$work/pipe-idx3-ubyte' $fifo" "$cli" stage "$work/pipe-idx3-ubyte" --format idx
    expect_error "FIFO as --index" "$np" "stage: --index: '$work/pipe.idx' $fifo" "$cli" stage "$tfr" --index "$work/pipe.idx"
    expect_error "FIFO, index command" "$np" "index: FILE: '$work/pipe.tfrecord' $fifo" "$cli" index "$work/pipe.tfrecord" -o "$work/out.idx"
    expect_error "FIFO, convert idx" "$np" "convert: IMAGES: '$work/pipe-idx3-ubyte' $fifo" \
        "$cli" convert idx "$work/pipe-idx3-ubyte" "$fmnist/t10k-labels-idx1-ubyte.gz" -o "$work/conv.h5"
done
rank_dirs "$work/fifo3" data.tfrecord "2:$work/pipe.tfrecord" "$tfr"
expect_error "FIFO on rank 2 only" 3 "[rank 2] stage: FILE: 'data.tfrecord' $fifo" \
    "$work/in_rank_dir.sh" "$work/fifo3" "$cli" stage data.tfrecord

echo "== 3. --json of a failed run"
json="$work/report.json"
for np in 1 3; do
    echo '{"status": "stale"}' > "$json"
    expect_error "missing file with --json" "$np" "stage: FILE: '$work/missing.h5' does not exist" \
        "$cli" stage "$work/missing.h5" --json "$json"
    python3 - "$json" "$work/case.err" <<'PY' || fail "error JSON (np $np)"
import json, re, sys
r = json.load(open(sys.argv[1]))
line = [l for l in open(sys.argv[2]) if l.startswith("mpistage: rank 0: ")][0].rstrip("\n")
kind, message = re.match(r"mpistage: rank 0: (\w+): (.*)$", line).groups()
assert r["status"] == "error", r
assert r["error"] == {"kind": kind, "message": message}, (r, kind, message)
PY
    expect_ok "successful run with --json" "$np" "$cli" stage "$tfr" -b 4 --remainder mask --verify -q --json "$json"
    python3 - "$json" "$np" <<'PY' || fail "ok JSON (np $np)"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "ok" and r["world_size"] == int(sys.argv[2]), r
for k in ("wait_seconds", "wait_io_seconds", "wait_peers_seconds"):
    assert all(isinstance(x[k], float) and x[k] >= 0 for x in r["ranks"]), (k, r["ranks"])
assert sum(e["valid_samples_per_rank"][i] for e in r["epochs"] for i in range(int(sys.argv[2]))) == 37
PY
    expect_error "--json into a missing folder" "$np" "stage: cannot write --json file '$work/nope/r.json': cannot write into its folder '$work/nope': No such file or directory" \
        "$cli" stage "$tfr" --json "$work/nope/r.json"
done
leftovers=$(find "$work" -maxdepth 1 -name 'report.json.tmp.*' | wc -l)
[ "$leftovers" -eq 0 ] || fail "temporary JSON files left behind: $leftovers"
echo "PASS no temporary JSON files left"

echo "== 4. negative values for unsigned flags"
for np in 1 3; do
    for flag in --epochs --batch-size --first-epoch --seed --prefetch --threads --timeout; do
        expect_error "$flag -1" "$np" "$flag: must not be negative (got '-1')" "$cli" stage "$tfr" "$flag" -1
    done
    expect_error "--chunk-rows -1" "$np" "--chunk-rows: must not be negative (got '-1')" \
        "$cli" convert idx "$fmnist/t10k-images-idx3-ubyte.gz" "$fmnist/t10k-labels-idx1-ubyte.gz" -o "$work/c.h5" --chunk-rows -1
done
expect_error "--epochs -1 on rank 1 only" 3 "[rank 1] --epochs: must not be negative (got '-1')" \
    "$work/per_rank_args.sh" 1 "--epochs -1" "--epochs 1" "$cli" stage "$tfr" -q

echo "== 5. permission denied"
mkdir -p "$work/perm/closed"
cp "$tfr" "$work/perm/locked.tfrecord"
cp "$tfr" "$work/perm/closed/inside.tfrecord"
chmod 000 "$work/perm/locked.tfrecord" "$work/perm/closed"
chmod 755 "$work" "$work/perm"
as_user=()
if [ "$(id -u)" -eq 0 ]; then
    # root reads mode-000 files: run this case as nobody (mpirun included, so its session
    # directory belongs to nobody too).
    command -v setpriv >/dev/null || fail "running as root without setpriv: cannot test permission denied"
    as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME=/tmp)
    "${as_user[@]}" test -x "$cli" || fail "user nobody cannot execute $cli (permission case)"
fi
for np in 1 3; do
    for path in "$work/perm/locked.tfrecord" "$work/perm/closed/inside.tfrecord"; do
        start=$(date +%s.%N)
        set +e
        "${as_user[@]}" timeout -k 5 30 "$mpiexec" -np "$np" --oversubscribe "$cli" stage "$path" \
            >"$work/case.out" 2>"$work/case.err"
        rc=$?
        set -e
        elapsed=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
        { [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -lt 128 ]; } || { cat "$work/case.err"; fail "permission ($path, np $np): rc=$rc"; }
        n=$(grep -c -F "IoError: [rank 0 and $((np - 1)) other rank(s)] stage: FILE: '$path' cannot be read: permission denied" "$work/case.err" || true)
        [ "$np" -gt 1 ] || n=$(grep -c -F "IoError: [rank 0] stage: FILE: '$path' cannot be read: permission denied" "$work/case.err" || true)
        [ "$n" -eq "$np" ] || { cat "$work/case.err"; fail "permission ($path, np $np): message on $n of $np ranks"; }
        grep -q "does not exist" "$work/case.err" && fail "permission ($path) reported as missing"
        echo "PASS permission denied ${path#$work/} np=$np rc=$rc ${elapsed}s"
    done
done
chmod 755 "$work/perm/closed"

echo "== 6. --timeout and --verify-files are agreed; the laggard columns are printed"
expect_error "--timeout differs" 3 "--timeout is '300' on rank 0 but '5' on rank 2" \
    "$work/per_rank_args.sh" 2 "--timeout 5" "" "$cli" stage "$tfr" -q
expect_error "--verify-files on one rank" 3 "--verify-files is 'off' on rank 0 but 'on' on rank 1" \
    "$work/per_rank_args.sh" 1 "--verify-files" "" "$cli" stage "$tfr" -q
for np in 1 3; do
    expect_ok "--timeout 0 --verify-files" "$np" "$cli" stage "$tfr" --timeout 0 --verify-files -b 2 --remainder mask --verify
    grep -q -E '^ +rank +samples +batches +bytes +MB/s +wait_s +wait_io_s +wait_peers_s +moved +device +H2D_GB/s$' "$work/case.out" \
        || { cat "$work/case.out"; fail "no wait_io_s / wait_peers_s columns"; }
    grep -q '^exactly-once: OK$' "$work/case.out" || { cat "$work/case.out"; fail "not exactly once"; }
done
echo "e2e hostile_inputs: OK"
