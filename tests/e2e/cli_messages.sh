#!/usr/bin/env bash
# The command line as a new user meets it (issue "HPC integration"): one test per defect found.
#   1. a misspelt flag (`--batchsize 64`) is an unknown option with a suggestion, not a missing
#      file "64"; a misspelt command likewise
#   2. an agreed error is printed once (rank 0), naming the ranks that failed
#   3. a missing --field lists the datasets that exist; a missing --feature the features
#   4. flags that do not apply to the input format are refused (--feature on HDF5, ...)
#   5. choice options list their choices in --help and suggest the closest on a bad value;
#      a --timeout beyond its range (used to overflow the deadline) names the limit
#   6. --version names the build features with the versions of MPI and HDF5 (checked against
#      mpirun --version and h5dump --version)
#   7. progress: one line per epoch on rank 0 (none with --quiet), a live line on a terminal;
#      under mpirun (4 ranks, stderr a pipe) progress lines inside a long epoch (rate, ETA,
#      wait split); --progress none prints none
#   8. the JSON report has schema_version, MB/s per rank, the version, commit, command line,
#      hosts, per-rank per-epoch times and the rank others waited for; every key is in the README
# Usage: cli_messages.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
cli="$(readlink -f "$1")"; work="$2"; fmnist="$4"
readme="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/README.md"
if [ ! -s "$fmnist/t10k-images-idx3-ubyte.gz" ]; then
    echo "SKIP: Fashion-MNIST not found in '$fmnist' (Debian's dataset-fashion-mnist)"
    exit 77
fi
mpiexec="${MPIEXEC:-mpirun}"
unset MPISTAGE_ERRORS_ON_EVERY_RANK
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=../common/t10k_e2e.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/t10k_e2e.sh"

# expect_error NAME NP PATTERN... -- ARGS...: exit 2 within 60 s; the error printed exactly once,
# on one line that holds every PATTERN (fixed strings).
expect_error() {
    local name="$1" np="$2"; shift 2
    local patterns=()
    while [ "$1" != "--" ]; do patterns+=("$1"); shift; done
    shift
    set +e
    timeout -k 5 60 "$mpiexec" -np "$np" --oversubscribe "$cli" "$@" >"$work/out" 2>"$work/err"
    local rc=$?
    set -e
    [ "$rc" -eq 2 ] || { cat "$work/err"; fail "$name (np $np): rc=$rc, want 2"; }
    local lines
    lines=$(grep -c '^mpistage: ' "$work/err" || true)
    [ "$lines" -eq 1 ] || { cat "$work/err"; fail "$name (np $np): $lines error lines, want 1"; }
    for p in "${patterns[@]}"; do
        grep "^mpistage: " "$work/err" | grep -F -e "$p" >/dev/null \
            || { cat "$work/err"; fail "$name (np $np): no '$p'"; }
    done
    echo "PASS $name (np $np): $(grep '^mpistage: ' "$work/err" | cut -c1-160)"
}

echo "== 1. unknown options and commands"
for np in 1 3; do
    expect_error "misspelt flag" "$np" "unknown option '--batchsize' for 'mpistage stage'" \
        "did you mean '--batch-size'?" -- stage "$h5" --batchsize 64
    grep -q -e "'64'" -e "File does not exist" "$work/err" && fail "the value 64 was taken for a file"
    expect_error "misspelt flag with =" "$np" "unknown option '--epoch=2'" \
        "did you mean '--epochs'?" -- stage "$h5" --epoch=2
    expect_error "unknown flag, nothing close" "$np" "unknown option '--zzzz' for 'mpistage stage'" \
        -- stage "$h5" --zzzz
    grep -q "did you mean" "$work/err" && fail "a suggestion for --zzzz"
    expect_error "misspelt command" "$np" "unknown command 'stag' for 'mpistage'" \
        "did you mean 'stage'?" "(commands: stage, convert, index)" -- stag "$h5"
    expect_error "misspelt subcommand" "$np" "unknown command 'idz' for 'mpistage convert'" \
        "did you mean 'idx'?" -- convert idz a b -o c
done

echo "== 2. an agreed error is printed once, naming the failing ranks"
expect_error "missing file, 3 ranks" 3 "IoError: [rank 0 and 2 other rank(s)]" \
    "stage: FILE: '$work/missing.h5' does not exist" -- stage "$work/missing.h5" --field images
# A file missing on rank 2 only: rank 0 prints the error of rank 2, once.
cat > "$work/rank2_missing.sh" <<'SH'
#!/usr/bin/env bash
f="$1"; shift; [ "${OMPI_COMM_WORLD_RANK:-0}" = 2 ] && f="$f.missing"
exec "$@" stage "$f"
SH
chmod +x "$work/rank2_missing.sh"
set +e
timeout -k 5 60 "$mpiexec" -np 3 --oversubscribe "$work/rank2_missing.sh" "$h5" "$cli" \
    >/dev/null 2>"$work/err"
set -e
[ "$(grep -c '^mpistage: ' "$work/err")" -eq 1 ] || { cat "$work/err"; fail "rank 2's error not once"; }
grep -q -F "mpistage: IoError: [rank 2] stage: FILE: '$h5.missing' does not exist" "$work/err" \
    || { cat "$work/err"; fail "rank 2's error does not name rank 2"; }
# With MPISTAGE_ERRORS_ON_EVERY_RANK=1 every rank prints its copy: the same message 3 times.
set +e
MPISTAGE_ERRORS_ON_EVERY_RANK=1 timeout 60 "$mpiexec" -np 3 --oversubscribe "$cli" stage \
    "$work/missing.h5" 2>"$work/err3" >/dev/null
set -e
[ "$(grep -c "^mpistage: rank [012]: IoError: \[rank 0 and 2 other rank(s)\]" "$work/err3")" -eq 3 ] \
    || { cat "$work/err3"; fail "MPISTAGE_ERRORS_ON_EVERY_RANK=1: not 3 copies"; }

echo "== 3. missing fields and features list what exists"
for np in 1 2; do
    expect_error "missing --field" "$np" "dataset 'imgs' does not exist in the file" \
        "(datasets in the file: images, labels)" -- stage "$h5" --field imgs --field labels
    expect_error "missing --feature" "$np" "feature 'img' is missing" \
        "(the record has: image, label)" -- stage "$tfr" --feature img:bytes/uint8:28x28 -b 8
done

echo "== 4. flags that do not apply to the format"
expect_error "--feature on HDF5" 2 "stage: --feature does not apply to hdf5 input" \
    "detected as hdf5" -- stage "$h5" --feature label:int64
expect_error "--index on HDF5" 2 "stage: --index does not apply to hdf5 input" -- \
    stage "$h5" --index "$h5" --format hdf5
expect_error "--on-corrupt on HDF5" 1 "stage: --on-corrupt does not apply to hdf5 input" -- \
    stage "$h5" --on-corrupt skip
expect_error "--field on TFRecord" 2 "stage: --field does not apply to tfrecord input" \
    "--feature NAME:TYPE" -- stage "$tfr" --field images
"$cli" stage "$tfr" --feature label:int64 -b 100 -q || fail "--feature on TFRecord refused"
"$cli" stage "$h5" --field labels -b 100 -q || fail "--field on HDF5 refused"

echo "== 5. choices"
help=$("$cli" stage --help)
for choices in "{auto,hdf5,idx,tfrecord}" "{none,local,global,chunks}" "{byte_range,global}" \
               "{drop,pad,mask}" "{error,skip}" "{off,on,auto}"; do
    grep -q -F -e "$choices" <<<"$help" || { echo "$help"; fail "stage --help lacks $choices"; }
done
"$cli" convert idx --help | grep -F "{hdf5,tfrecord}" >/dev/null || fail "convert idx --help lacks its formats"
expect_error "bad choice" 2 "--remainder: 'mak' is not one of drop, pad, mask" \
    "did you mean 'mask'?" -- stage "$h5" --remainder mak
expect_error "timeout beyond its range" 2 "--timeout" "10000000000" "2592000" \
    -- stage "$h5" --timeout 10000000000

echo "== 6. --version"
version=$("$cli" --version)
echo "$version"
mpi_version=$("$mpiexec" --version | sed -n 's/.*(Open MPI) \([0-9.]*\).*/\1/p' | head -1)
hdf5_version=$(h5dump --version | sed -n 's/.*Version \([0-9.]*\).*/\1/p')
grep -q "^mpistage [0-9]" <<<"$version" || fail "--version: no 'mpistage X.Y.Z'"
grep -q "MPI: .*$mpi_version" <<<"$version" || fail "--version: no MPI $mpi_version"
grep -q "HDF5: *$hdf5_version, parallel" <<<"$version" || fail "--version: no HDF5 $hdf5_version"
grep -E -q "torch: +(no|yes, [0-9])" <<<"$version" || fail "--version: no torch line"
grep -E -q "CUDA: +(no|yes, [0-9])" <<<"$version" || fail "--version: no CUDA line"

echo "== 7. progress"
"$mpiexec" -np 2 --oversubscribe "$cli" stage "$h5" -b 1000 --epochs 3 --first-epoch 5 \
    >"$work/out" 2>"$work/err"
[ "$(grep -c '^epoch [567] ([123]/3): 5 steps, 5000 samples, .* MB/s on rank 0' "$work/err")" -eq 3 ] \
    || { cat "$work/err"; fail "not one progress line per epoch (rank 0 only)"; }
"$mpiexec" -np 2 --oversubscribe "$cli" stage "$h5" -b 1000 --epochs 3 -q >"$work/out" 2>"$work/err"
[ ! -s "$work/err" ] && [ ! -s "$work/out" ] || { cat "$work/out" "$work/err"; fail "--quiet printed"; }
# Under mpirun rank 0's stderr is a pipe: a long epoch prints progress lines inside it (rate,
# ETA, the wait split), by default (auto) and with --progress lines; none prints none.
"$mpiexec" -np 4 --oversubscribe "$cli" stage "$h5" -b 50 --compute-ms 40 --progress-every 1 \
    >"$work/out" 2>"$work/err"
grep -E -q '^epoch 0 \(1/1\): step [0-9]+/50 \([0-9]+%\), [0-9]+ samples/s, [0-9.]+ MB/s, ETA [0-9]+ s, waits on rank 0: io [0-9.]+ s, peers [0-9.]+ s$' "$work/err" \
    || { cat "$work/err"; fail "no progress line inside the epoch under mpirun (4 ranks)"; }
"$mpiexec" -np 2 --oversubscribe "$cli" stage "$h5" -b 1000 --progress none --progress-every 0 \
    >"$work/out" 2>"$work/err"
grep -q 'step ' "$work/err" && { cat "$work/err"; fail "--progress none printed step lines"; }
# On a terminal (script(1) gives it a pseudo-terminal) the step is shown live, in place.
script -qec "'$cli' stage '$h5' -b 10 --epochs 2" /dev/null >"$work/tty" 2>&1 \
    || { cat "$work/tty"; fail "stage under a terminal"; }
grep -a -q $'\r\033\\[Kepoch 0 (1/2): step [0-9]*/1000' "$work/tty" \
    || { cat -v "$work/tty" | head -5; fail "no live progress line on a terminal"; }

echo "== 8. JSON report"
"$mpiexec" -np 3 --oversubscribe "$cli" stage "$h5" -b 100 --epochs 2 --verify -q \
    --json "$work/report.json"
python3 - "$work/report.json" "$readme" "$h5" <<'PY' || fail "JSON report"
import json, re, sys
r = json.load(open(sys.argv[1]))
readme = open(sys.argv[2]).read()
assert r["schema_version"] == 2, r.get("schema_version")
assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", r["mpistage_version"]), r["mpistage_version"]
assert re.fullmatch(r"[0-9a-f]{40}|unknown", r["git_commit"]), r["git_commit"]
assert r["command_line"][1:3] == ["stage", sys.argv[3]], r["command_line"]
assert sorted(k for h in r["hosts"] for k in h["ranks"]) == [0, 1, 2], r["hosts"]
for rank in r["ranks"]:
    assert any(h["host"] == rank["host"] and rank["rank"] in h["ranks"] for h in r["hosts"]), rank
for e in r["epochs"]:
    assert [x["rank"] for x in e["ranks"]] == [0, 1, 2], e["ranks"]
    assert e["waited_on_rank"] in (0, 1, 2), e["waited_on_rank"]
    for x in e["ranks"]:
        assert 0 <= x["wait_io_seconds"] + x["wait_peers_seconds"] <= x["wait_seconds"] + 1e-3, x
        assert x["wait_seconds"] <= x["seconds"] + 1e-3, x
for rank in r["ranks"]:
    want = rank["bytes"] / rank["seconds"] / 1e6
    assert abs(rank["mb_per_s"] - want) <= 1e-6 * max(1.0, want), (rank, want)
    assert rank["bytes"] == rank["samples"] * (784 + 1), rank
def keys(node):
    if isinstance(node, dict):
        for k, v in node.items():
            yield k
            yield from keys(v)
    elif isinstance(node, list):
        for v in node:
            yield from keys(v)
missing = sorted({k for k in keys(r) if f"`{k}`" not in readme})
assert not missing, f"JSON keys not documented in README.md: {missing}"
PY
echo "e2e cli_messages: OK"
