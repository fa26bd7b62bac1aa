#!/usr/bin/env bash
# End to end, issue "Collective safety": one of 4 ranks of `mpistage stage --timeout 5` is
# stopped (SIGSTOP) during an epoch; the other ranks end the job within timeout + 10 s with the
# watchdog's message naming the stopped rank and the step they were waiting at. Then one rank
# is killed (SIGKILL): the job ends within the same bound.
# Usage: watchdog.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
cli="$1"; work="$2"; fmnist="$4"
mpiexec="${MPIEXEC:-mpirun}"
timeout_s=5
bound_s=$((timeout_s + 10))
victim=2
mkdir -p "$work"
h5="$work/train.h5"
[ -s "$h5" ] || "$cli" convert idx "$fmnist/train-images-idx3-ubyte.gz" \
    "$fmnist/train-labels-idx1-ubyte.gz" -o "$h5"

fail() { echo "FAIL: $*" >&2; exit 1; }

job=""; stopped=""
cleanup() {
    [ -n "$stopped" ] && { kill -CONT "$stopped" 2>/dev/null || true; kill -KILL "$stopped" 2>/dev/null || true; }
    [ -n "$job" ] && kill -KILL "$job" 2>/dev/null || true
    # Any rank of this script's jobs still alive (matched by the unique work directory).
    for p in $(pgrep -f -- "$cli stage $h5" 2>/dev/null); do
        kill -CONT "$p" 2>/dev/null || true; kill -KILL "$p" 2>/dev/null || true
    done
}
trap cleanup EXIT

rank_pid() {  # rank_pid RANK: the pid of that rank of the running job (Open MPI's environment)
    local p
    for p in $(pgrep -f -- "$cli stage $h5" 2>/dev/null); do
        if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -x "OMPI_COMM_WORLD_RANK=$1" >/dev/null; then
            echo "$p"; return 0
        fi
    done
    return 1
}

# run_and_signal NAME SIGNAL: starts a long job, sends SIGNAL to rank $victim once the epochs
# run, and waits for the job to end. Sets $elapsed (seconds from the signal to the end), $rc.
run_and_signal() {
    local name="$1" sig="$2" out="$work/$1.out"
    "$mpiexec" -np 4 --oversubscribe "$cli" stage "$h5" --epochs 100000 --batch-size 32 \
        --timeout "$timeout_s" >"$out" 2>&1 &
    job=$!
    local i pid=""
    for i in $(seq 1 600); do  # up to 60 s for start-up and construction
        grep -q "epoch(s)" "$out" 2>/dev/null && pid=$(rank_pid "$victim") && break
        kill -0 "$job" 2>/dev/null || { cat "$out"; fail "$name: the job ended before the signal"; }
        sleep 0.1
    done
    [ -n "$pid" ] || { cat "$out"; fail "$name: rank $victim never started its epochs"; }
    sleep 1  # well inside the epochs
    kill "-$sig" "$pid"
    [ "$sig" = STOP ] && stopped="$pid"
    local t0 t1
    t0=$(date +%s.%N)
    for i in $(seq 1 $((bound_s * 10 + 300))); do
        kill -0 "$job" 2>/dev/null || break
        sleep 0.1
    done
    t1=$(date +%s.%N)
    elapsed=$(python3 -c "print(round($t1 - $t0, 1))")
    if kill -0 "$job" 2>/dev/null; then cat "$out"; fail "$name: the job still runs ${elapsed} s after SIG$sig"; fi
    set +e; wait "$job"; rc=$?; set -e
    job=""
    [ -n "$stopped" ] && { kill -CONT "$stopped" 2>/dev/null || true; kill -KILL "$stopped" 2>/dev/null || true; stopped=""; }
    echo "$name: SIG$sig to rank $victim (pid $pid): job ended after ${elapsed} s with exit status $rc"
    [ "$rc" -ne 0 ] || { cat "$out"; fail "$name: exit status 0 after SIG$sig of a rank"; }
    python3 -c "import sys; sys.exit(0 if $elapsed <= $bound_s else 1)" ||
        { cat "$out"; fail "$name: ended after ${elapsed} s, more than timeout + 10 = $bound_s s"; }
}

run_and_signal stop STOP
out="$work/stop.out"
grep -q "mpistage watchdog: collective #[0-9]* (.*) did not complete within $timeout_s s" "$out" ||
    { cat "$out"; fail "no watchdog message"; }
grep -q "Rank(s) that did not arrive: $victim " "$out" || { cat "$out"; fail "the stopped rank is not named"; }
grep -q "rank $victim: no answer" "$out" || { cat "$out"; fail "the stopped rank's state is missing"; }
for r in 0 1 3; do
    # Waiting inside an epoch (agree on batch) or at the start of the next one; both name the
    # epoch and the step, and which one depends on where the signal landed.
    grep -Eq "rank $r: waiting at collective #[0-9]+ .*loader: (agree on batch|epoch start), epoch [0-9]+, step [0-9]+" "$out" ||
        { cat "$out"; fail "rank $r's state (epoch, step) is missing"; }
done
sed -n '/mpistage watchdog/,/Aborting/p' "$out"

run_and_signal kill KILL
echo "watchdog: OK"
