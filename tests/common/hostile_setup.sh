# Sourced by tests/e2e/hostile_inputs.sh and hostile_arguments.sh (one script took over a
# minute): arguments MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR. Skips (exit 77)
# without the shared test data; sets cli, work, data, fmnist, mpiexec, tfr, h5 and the helpers
# run_case, expect_error, expect_ok, rank_dirs and the per-rank wrapper scripts.
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
