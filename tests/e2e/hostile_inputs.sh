#!/usr/bin/env bash
# Collective safety of the CLI (issue "Collective safety"): hostile inputs and arguments must end
# EVERY rank with a clear error within 30 s, exit non-zero and not by a signal, at 1 and 3 ranks;
# where the error is agreed, every rank prints the same message.
#   1. the same path names an HDF5 file on some ranks and a TFRecord on another (per-rank
#      directories: `in_rank_dir.sh` runs each rank in DIR/rankR, so the relative path
#      `data.tfrecord` is a different symlink on each rank)
#   2. a FIFO as FILE (every format), as --index, for `index` and `convert idx`, and on one rank
#   3. --json on a failed run: an atomic report with "status": "error" and the agreed message;
#      --json under /proc or /sys is refused before any work
#   1 also: the same TFRecord path with other bytes on one rank is "a file differs between
#      ranks", naming the file and the rank
#   (items 4-6, hostile arguments, are in hostile_arguments.sh)
# Usage: hostile_inputs.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
# shellcheck source=../common/hostile_setup.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/hostile_setup.sh"

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
# The same TFRecord except one byte on rank 2 (same size): "differs between ranks" at open,
# naming the file and the ranks (it was exit 0 when the byte lay in a record another rank read,
# "record header ... changed since open" when it lay in a record header).
python3 - "$tfr" "$work/flipped.tfrecord" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 2] ^= 0xFF
open(sys.argv[2], "wb").write(b)
PY
rank_dirs "$work/differs3" data.tfrecord "2:$work/flipped.tfrecord" "$tfr"
expect_error "TFRecord differs on rank 2" 3 \
    "ConfigError: tfrecord: a file differs between ranks: ranks disagree: file 'data.tfrecord' is 'size=66591 head=" \
    "$work/in_rank_dir.sh" "$work/differs3" "$cli" stage data.tfrecord -q
grep -q "' on rank 2; every rank must open the same, unchanging files" "$work/case.err" \
    || { cat "$work/case.err"; fail "TFRecord differs on rank 2: rank 2 not named"; }
grep -q "changed since open" "$work/case.err" && fail "TFRecord differs on rank 2: reported as changed since open"

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
# /proc and /sys pass access(W_OK) as root but take no new file: the early check creates (and
# removes) the writer's temporary file, so the run fails before any work (it used to stage
# every epoch, then fail to write the report).
for dir in /proc /sys; do
    expect_error "--json under $dir" 3 "ConfigError: [rank 0] stage: cannot write --json file '$dir/mpistage-e2e.json': cannot" \
        "$cli" stage "$tfr" --json "$dir/mpistage-e2e.json"
    grep -q . "$work/case.out" && { cat "$work/case.out"; fail "--json under $dir: the run started"; }
    [ ! -e "$dir/mpistage-e2e.json" ] || fail "--json under $dir: a file was created"
done
leftovers=$(find "$work" -maxdepth 1 -name 'report.json.tmp.*' | wc -l)
[ "$leftovers" -eq 0 ] || fail "temporary JSON files left behind: $leftovers"
echo "PASS no temporary JSON files left"
echo "e2e hostile_inputs: OK"
