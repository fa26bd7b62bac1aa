#!/usr/bin/env bash
# Output paths of `mpistage stage` and `convert` (issue "The last silent edges"): a regular file
# (or a new path) is replaced atomically; a character device, a FIFO or /dev/stdout is written in
# place and stays what it was; a directory or an unwritable folder is refused before the run, the
# same error on every rank. Run as root the old writer renamed its temporary over /dev/null.
#   1. --json, --save-state and --ids-out to character devices made with mknod in the work folder
#      (the kind of /dev/null) stay character devices, and the run succeeds (files and streams,
#      1 and 3 ranks); convert -o to one is refused and leaves it alone
#   2. --json to a FIFO: the report arrives through it, and it stays a FIFO
#   3. --json /dev/stdout with stdout redirected to a file: the report is appended to the file
#   4. a symbolic link to a regular file: the file it names is replaced, the link stays a link
#   5. a directory, a missing folder, a folder that is a file: refused before the run, naming
#      the flag and the path, on every rank
#   6. temporaries a killed run left beside an output (OUT.tmp.XXXXXX) are removed by the next run
# Usage: output_paths.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
# shellcheck source=../common/hostile_setup.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/hostile_setup.sh"

db="$work/t.db"
python3 - "$db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, payload BLOB)")
db.executemany("INSERT INTO t VALUES(?, ?)", ((i, bytes([i % 256]) * 8) for i in range(500)))
db.commit()
PY
query="SELECT id, payload FROM t"

echo "== 1. character devices (mknod c 1 3, the kind of /dev/null)"
if mknod "$work/probe.null" c 1 3 2>/dev/null; then
    rm -f "$work/probe.null"
    for np in 1 3; do
        rm -f "$work"/json.null "$work"/state.null "$work"/ids.null
        for n in json state ids; do mknod "$work/$n.null" c 1 3; done
        expect_ok "files: --json and --save-state to character devices" "$np" \
            "$cli" stage "$tfr" -q --json "$work/json.null" --save-state "$work/state.null" --verify
        for n in json state; do
            [ -c "$work/$n.null" ] || { ls -l "$work/$n.null"; fail "np $np: $n.null is no longer a character device"; }
        done
        expect_ok "stream: --json, --save-state and --ids-out to character devices" "$np" \
            "$cli" stage --sqlite "$db" --query "$query" -q --json "$work/json.null" \
            --save-state "$work/state.null" --ids-out "$work/ids.null" --verify
        for n in json state ids; do
            [ -c "$work/$n.null" ] || { ls -l "$work/$n.null"; fail "np $np: $n.null is no longer a character device"; }
        done
        echo "PASS np=$np: json.null, state.null and ids.null are still character devices"
    done
    expect_error "convert -o a character device" 1 \
        "convert: -o '$work/json.null' is not a regular file" \
        "$cli" convert idx "$fmnist/t10k-images-idx3-ubyte.gz" "$fmnist/t10k-labels-idx1-ubyte.gz" \
        -o "$work/json.null"
    [ -c "$work/json.null" ] || fail "convert replaced the character device"
    [ -z "$(find "$work" -maxdepth 1 -name '*.null.tmp*')" ] || fail "temporaries left beside the devices"
else
    echo "NOTE: mknod not permitted here (not root or no CAP_MKNOD): case 1 not run"
fi

echo "== 2. a FIFO"
mkfifo "$work/report.fifo"
for np in 1 3; do
    cat "$work/report.fifo" > "$work/fifo.out" &
    reader=$!
    expect_ok "--json to a FIFO" "$np" "$cli" stage "$tfr" -q --json "$work/report.fifo"
    wait "$reader"
    [ -p "$work/report.fifo" ] || fail "np $np: the FIFO is no longer a FIFO"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['status']=='ok', r" \
        "$work/fifo.out" || fail "np $np: no report came through the FIFO"
    echo "PASS np=$np: the report came through the FIFO, which stays a FIFO"
done

echo "== 3. /dev/stdout"
set +e
timeout -k 5 30 "$mpiexec" -np 2 --oversubscribe "$cli" stage "$tfr" -q --json /dev/stdout \
    >"$work/stdout.txt" 2>"$work/stdout.err"
rc=$?
set -e
[ "$rc" -eq 0 ] || { cat "$work/stdout.err"; fail "--json /dev/stdout: rc=$rc"; }
[ -L /dev/stdout ] || [ -c /dev/stdout ] || fail "/dev/stdout was replaced"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['status']=='ok', r" \
    "$work/stdout.txt" || { cat "$work/stdout.txt"; fail "--json /dev/stdout: no report on stdout"; }
echo "PASS --json /dev/stdout: the report is on stdout"

echo "== 4. a symbolic link to a regular file"
echo old > "$work/target.json"
ln -sf target.json "$work/link.json"
expect_ok "--json to a link" 2 "$cli" stage "$tfr" -q --json "$work/link.json"
[ -L "$work/link.json" ] || fail "the link was replaced by a file"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['status']=='ok', r" \
    "$work/target.json" || fail "the file the link names was not replaced"
echo "PASS the link stays a link; the file it names holds the report"

echo "== 5. refused before the run, on every rank"
mkdir -p "$work/adir"
echo x > "$work/afile"
for np in 1 3; do
    expect_error "--json a directory" "$np" \
        "stage: cannot write --json file '$work/adir': it is a directory" \
        "$cli" stage "$tfr" --json "$work/adir"
    grep -q . "$work/case.out" && { cat "$work/case.out"; fail "--json a directory: the run started"; }
    expect_error "--save-state a directory" "$np" \
        "stage: cannot write --save-state file '$work/adir': it is a directory" \
        "$cli" stage "$tfr" --save-state "$work/adir"
    expect_error "--ids-out a directory" "$np" \
        "stage: cannot write --ids-out file '$work/adir': it is a directory" \
        "$cli" stage --sqlite "$db" --query "$query" --ids-out "$work/adir"
    expect_error "--save-state in a missing folder" "$np" \
        "stage: cannot write --save-state file '$work/nope/s.json': cannot write into its folder '$work/nope'" \
        "$cli" stage "$tfr" --save-state "$work/nope/s.json"
    expect_error "--ids-out under a file" "$np" \
        "stage: cannot write --ids-out file '$work/afile/ids.txt': cannot write into its folder '$work/afile': Not a directory" \
        "$cli" stage --sqlite "$db" --query "$query" --ids-out "$work/afile/ids.txt"
done

echo "== 6. temporaries of a killed run"
touch "$work/r.json.tmp.AbC123" "$work/s.json.tmp.xYz789" "$work/r.json.tmp.keep-me"
expect_ok "outputs beside stale temporaries" 2 \
    "$cli" stage "$tfr" -q --json "$work/r.json" --save-state "$work/s.json"
[ ! -e "$work/r.json.tmp.AbC123" ] || fail "the stale --json temporary is still there"
[ ! -e "$work/s.json.tmp.xYz789" ] || fail "the stale --save-state temporary is still there"
[ -e "$work/r.json.tmp.keep-me" ] || fail "a file that is no temporary of ours was removed"
echo "PASS stale temporaries removed, other files kept"
echo "ALL PASS"
