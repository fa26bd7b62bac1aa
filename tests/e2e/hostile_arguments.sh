#!/usr/bin/env bash
# Collective safety of the CLI (issue "Collective safety"), hostile arguments (the inputs are in
# hostile_inputs.sh): every rank ends with a clear error within 30 s, exit non-zero and not by a
# signal; where the error is agreed, every rank prints the same message.
#   4. negative values for unsigned flags (on every rank, and on one rank only)
#   5. permission denied is not "does not exist" (as user nobody when run as root)
#   6. --timeout, --verify-files and --batch-bytes take part in the argument agreement (named
#      with both values); wait_io/wait_peers are reported
#   7. a low `ulimit -n`: a clear error naming the descriptor limit and the file, on every rank
# Usage: hostile_arguments.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
# shellcheck source=../common/hostile_setup.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/hostile_setup.sh"

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
        [ "$np" -gt 1 ] || n=$(grep -c -F "IoError: stage: FILE: '$path' cannot be read: permission denied" "$work/case.err" || true)
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
expect_error "--batch-bytes on one rank" 3 "--batch-bytes is '2048' on rank 0 but '4096' on rank 2" \
    "$work/per_rank_args.sh" 2 "--batch-bytes 4096" "--batch-bytes 2048" "$cli" stage "$tfr" -q
for np in 1 3; do
    expect_ok "--timeout 0 --verify-files" "$np" "$cli" stage "$tfr" --timeout 0 --verify-files -b 2 --remainder mask --verify
    grep -q -E '^ +rank +samples +batches +bytes +MB/s +wait_s +wait_io_s +wait_peers_s +moved +device +H2D_GB/s$' "$work/case.out" \
        || { cat "$work/case.out"; fail "no wait_io_s / wait_peers_s columns"; }
    grep -q '^exactly-once: OK$' "$work/case.out" || { cat "$work/case.out"; fail "not exactly once"; }
done
echo "== 7. a low limit on file descriptors (ulimit -n in the rank, past MPI_Init)"
# It was "MPI_ERR_OTHER: known error not in list" from MPI_File_open, or for HDF5 "not an HDF5
# file"; now the same IoError on every rank, naming the limit and the file.
ulimit_cmd() { echo "ulimit -n $1; exec \"\$0\" \"\$@\""; }
fds="too few file descriptors to open"
limit="(RLIMIT_NOFILE soft limit, \`ulimit -n\`; hard limit"
expect_error "ulimit -n 16, TFRecord" 3 "tfrecord: $fds '$tfr': this rank has" bash -c "$(ulimit_cmd 16)" "$cli" stage "$tfr" -q
grep -q -F "may open at most 16 $limit 16)" "$work/case.err" || { cat "$work/case.err"; fail "limit not named"; }
expect_error "ulimit -n 16, HDF5" 3 "hdf5: $fds '$h5': this rank has" bash -c "$(ulimit_cmd 16)" "$cli" stage "$h5" -q
many=()
for i in $(seq 1 20); do ln -sf "$tfr" "$work/many$i.tfrecord"; many+=("$work/many$i.tfrecord"); done
expect_error "ulimit -n 40, 20 TFRecord files" 3 "tfrecord: $fds '$work/many1.tfrecord' and 19 other file(s)" \
    bash -c "$(ulimit_cmd 40)" "$cli" stage "${many[@]}" -q
expect_ok "ulimit -n 64, 20 TFRecord files (control)" 3 bash -c "$(ulimit_cmd 64)" "$cli" stage "${many[@]}" -q
echo "e2e hostile_arguments: OK"
