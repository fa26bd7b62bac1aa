#!/usr/bin/env bash
# End to end (checkpoint on signal): a 4-rank run of Fashion-MNIST t10k gets SIGUSR1 on one
# rank only, mid-epoch; every rank stops at the same agreed step, the state is saved there,
# the run exits 75 (documented: README, `mpistage stage --help`); then --resume at 3 ranks with
# --verify gives exactly-once across both runs (global sharding). Also: --stop-signals none
# leaves SIGUSR1 to its default action, and a bad signal name is refused by name.
# Usage: stop_signal.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
cli="$1"; work="$2"; fmnist="$4"
mpiexec="${MPIEXEC:-mpirun}"
mkdir -p "$work"
source "$(dirname "$0")/../common/t10k_e2e.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }
state_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["loader"][sys.argv[2]])' "$1" "$2"; }
# The same without starting python (polled while the run goes on, on loaded machines).
quick_field() { grep -o "\"$2\": *[0-9]*" "$1" 2>/dev/null | grep -o '[0-9]*$' || echo 0; }

common=(--shuffle global --sharding global --seed 11 --epochs 2 --batch-size 32 --remainder mask)
st="$work/sig.json"; rm -f "$st" "$st.ids" "$work/sig-run.json"
# 10000 samples / (4 x 32) = 79 steps an epoch; 100 ms a step keeps the run mid-epoch for s.
setsid "$mpiexec" -np 4 --oversubscribe "$cli" stage "$h5" "${common[@]}" --verify \
    --save-state "$st" --save-every 10 --compute-ms 100 --json "$work/sig-run.json" \
    >"$work/sig.log" 2>&1 &
pid=$!
# Mid-epoch: the periodic save of step 10 (of 79) is written.
for _ in $(seq 1 1200); do
    if [ -s "$st" ] && [ "$(quick_field "$st" steps_consumed)" -ge 10 ]; then break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
seen=$(state_field "$st" steps_consumed)
[ "$(state_field "$st" epoch)" = 0 ] && [ "$seen" -ge 10 ] || { cat "$work/sig.log"; fail "no mid-epoch state"; }
ranks=$(pgrep -P "$pid" || true)
[ "$(wc -w <<<"$ranks")" = 4 ] || fail "expected 4 rank processes under mpirun, found: $ranks"
one=$(tr ' ' '\n' <<<"$ranks" | head -n 1)
kill -USR1 "$one"
set +e
wait "$pid"
rc=$?
set -e
out=$(cat "$work/sig.log")
[ "$rc" = 75 ] || { echo "$out"; fail "exit code $rc after SIGUSR1, expected 75"; }
grep -q "stopped by SIGUSR1 after [0-9]* step(s) on every rank" <<<"$out" || { echo "$out"; fail "no stop line"; }
steps=$(state_field "$st" steps_consumed)
consumed=$(state_field "$st" samples_consumed)
[ "$(state_field "$st" epoch)" = 0 ] || fail "the state left epoch 0"
[ "$steps" -ge "$seen" ] && [ "$steps" -lt 79 ] || fail "state at step $steps (signal after $seen)"
[ "$consumed" = $((steps * 4 * 32)) ] || fail "state: $consumed samples after $steps steps of 4 x 32"
python3 - "$work/sig-run.json" "$steps" <<'PY' || fail "stopped run's JSON report"
import json, sys
r = json.load(open(sys.argv[1])); steps = int(sys.argv[2])
e = r["epochs"]
assert len(e) == 1 and e[0]["interrupted"], e
# Every rank stopped at the same step, the one the state was saved at.
assert e[0]["batches_per_rank"] == [steps] * 4, (e[0]["batches_per_rank"], steps)
assert r["stopped_by_signal"] == "USR1" and r["stop_signals"] == ["USR1", "TERM"], r
assert r["state"]["steps_consumed"] == steps and r["stopped_after_steps"] == steps, r["state"]
# The periodic saves (every 10 steps) and the one at the stop.
assert r["state_saves"] == steps // 10 + (0 if steps % 10 == 0 else 1), r["state_saves"]
PY
echo "SIGUSR1 to one of 4 ranks after step $seen: stopped at step $steps on every rank, exit 75"

out=$(timeout 300 "$mpiexec" -np 3 --oversubscribe "$cli" stage "$h5" "${common[@]}" --verify \
    --resume "$st" --json "$work/sig-resumed.json") || { echo "$out"; fail "resume at 3 ranks failed"; }
grep -q '^exactly-once: OK$' <<<"$out" || { echo "$out"; fail "no exactly-once: OK"; }
grep -q "of the interrupted run counted" <<<"$out" || { echo "$out"; fail "the id log was not used"; }
python3 - "$work/sig-resumed.json" "$consumed" <<'PY' || fail "resumed JSON report"
import json, sys
r = json.load(open(sys.argv[1])); consumed = int(sys.argv[2])
e = r["epochs"][0]
assert r["world_size"] == 3 and e["resumed"] and len(set(e["batches_per_rank"])) == 1, e
assert sum(e["valid_samples_per_rank"]) == 10000 - consumed, (e, consumed)
assert e["prior_run_samples"] == consumed and e["duplicates"] == 0 and e["missing"] == 0, e
assert r["stopped_by_signal"] is None and r["epochs"][1]["resumed"] is False, r
assert all(x["exactly_once"] for x in r["epochs"]), r["epochs"]
PY

# --stop-signals none: SIGUSR1 keeps its default action (the rank dies, the job fails).
# The signal goes to a rank that is mid-epoch (its periodic save of step 5 is written), so
# that the rank's own setup, not only mpirun's start, is behind it: on a loaded machine the
# ranks took over 2 s to appear.
stn="$work/none-state.json"; rm -f "$stn" "$stn".ids*
setsid "$mpiexec" -np 2 --oversubscribe "$cli" stage "$h5" "${common[@]}" --compute-ms 40 \
    --save-state "$stn" --save-every 5 --stop-signals none -q >"$work/none.log" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
    if [ -s "$stn" ] && [ "$(quick_field "$stn" steps_consumed)" -ge 5 ]; then break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
ranks=$(pgrep -P "$pid" || true)
[ "$(wc -w <<<"$ranks")" = 2 ] || { cat "$work/none.log"; fail "expected 2 rank processes for --stop-signals none, found: $ranks"; }
kill -USR1 $(tr ' ' '\n' <<<"$ranks" | head -n 1)
set +e
timeout 120 tail --pid="$pid" -f /dev/null
wait "$pid"
rc=$?
set -e
[ "$rc" != 0 ] && [ "$rc" != 75 ] || fail "--stop-signals none: exit code $rc (expected a failed job)"

set +e
out=$(timeout 120 "$mpiexec" -np 2 --oversubscribe "$cli" stage "$h5" --stop-signals USR1,KILL 2>&1)
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "stop-signals: 'KILL' is not a signal that can be caught" <<<"$out" \
    || { echo "$out"; fail "--stop-signals KILL must be refused by name (rc $rc)"; }
# SIGTERM to mpirun (a scheduler's preemption): mpirun forwards it to the ranks, which stop at
# an agreed step and save the state, but mpirun itself exits 1, not 75. --stop-marker is the
# launcher-independent sign (docs/resume.md, "Requeue under mpirun"): removed before a run,
# written when a stop signal ended it.
marker="$work/stopped.marker"
echo "from an earlier run" >"$marker"
timeout 120 "$mpiexec" -np 2 --oversubscribe "$cli" stage "$h5" "${common[@]}" -q \
    --stop-marker "$marker" >/dev/null || fail "a run with --stop-marker failed"
[ ! -e "$marker" ] || fail "a finished run left the marker of an earlier run"
st4="$work/term.json"; rm -f "$st4" "$st4".ids*
# mpirun sends SIGKILL odls_base_sigkill_timeout seconds after it forwarded SIGTERM (Open MPI's
# default 1 s; the test environment sets 0 so failing jobs end at once): give the ranks the
# default's grace to reach the agreed step.
setsid "$mpiexec" --mca odls_base_sigkill_timeout 1 -np 3 --oversubscribe "$cli" stage "$h5" \
    "${common[@]}" --verify \
    --save-state "$st4" --save-every 5 --compute-ms 100 --stop-marker "$marker" \
    >"$work/term.log" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
    if [ -s "$st4" ] && [ "$(quick_field "$st4" steps_consumed)" -ge 5 ]; then break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
kill -TERM "$pid"
set +e
timeout 120 tail --pid="$pid" -f /dev/null
wait "$pid"
rc=$?
set -e
echo "SIGTERM to mpirun: exit code $rc"
[ -s "$marker" ] || { cat "$work/term.log"; fail "no --stop-marker after SIGTERM to mpirun (rc $rc)"; }
grep -q "^stopped by SIGTERM after [0-9]* step(s); state: $st4\$" "$marker" ||
    { cat "$marker"; fail "the marker does not say the stop"; }
out=$(timeout 300 "$mpiexec" -np 2 --oversubscribe "$cli" stage "$h5" "${common[@]}" --verify \
    --resume "$st4" --stop-marker "$marker") || { echo "$out"; fail "resume after SIGTERM"; }
grep -q '^exactly-once: OK$' <<<"$out" || { echo "$out"; fail "no exactly-once: OK after SIGTERM"; }
[ ! -e "$marker" ] || fail "the completed continuation left the marker"
echo "stop_signal: OK"
