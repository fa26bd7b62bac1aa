#!/usr/bin/env bash
# End to end (issue "Fault recovery"): stage Fashion-MNIST at 4 ranks saving the state every
# step, SIGKILL every rank mid-epoch, resume at 3 ranks: --verify checks exactly-once across
# both runs (the state file's id log), and the JSON reports add up to every sample once.
# Also: the stop-and-resume command of the issue, byte_range at the same and another world
# size, and a damaged state file.
# Usage: resume_kill.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
cli="$1"; work="$2"; fmnist="$4"
mpiexec="${MPIEXEC:-mpirun}"
mkdir -p "$work"
h5="$work/train.h5"
[ -s "$h5" ] || "$cli" convert idx "$fmnist/train-images-idx3-ubyte.gz" "$fmnist/train-labels-idx1-ubyte.gz" -o "$h5"
fail() { echo "FAIL: $*" >&2; exit 1; }
state_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["loader"][sys.argv[2]])' "$1" "$2"; }

common=(--shuffle global --sharding global --seed 7 --epochs 1 --batch-size 64 --remainder mask)

# 1. SIGKILL all ranks of a 4-rank run after at least 5 saved steps.
st="$work/kill.json"; rm -f "$st" "$st.ids"
setsid "$mpiexec" -np 4 --oversubscribe "$cli" stage "$h5" "${common[@]}" --verify \
    --save-state "$st" --save-every 1 --compute-ms 40 --json "$work/kill-run.json" \
    >"$work/kill.log" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
    if [ -s "$st" ] && [ "$(state_field "$st" steps_consumed)" -ge 5 ]; then break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
# Open MPI puts each local rank in its own process group: SIGKILL the ranks (mpirun's
# children) and mpirun together, then make sure no rank is left to write the state.
ranks=$(pgrep -P "$pid" || true)
kill -9 $ranks "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
for r in $ranks; do
    for _ in $(seq 1 50); do kill -0 "$r" 2>/dev/null || break; sleep 0.1; done
    ! kill -0 "$r" 2>/dev/null || fail "rank process $r survived SIGKILL"
done
[ -n "$ranks" ] || fail "found no rank processes under mpirun $pid"
[ -s "$st" ] || { cat "$work/kill.log"; fail "no state file after the 4-rank run"; }
[ ! -e "$work/kill-run.json" ] || fail "the killed run finished before the kill (no interruption tested)"
steps=$(state_field "$st" steps_consumed)
consumed=$(state_field "$st" samples_consumed)
[ "$consumed" = $((steps * 4 * 64)) ] || fail "state: $consumed samples after $steps steps of 4 x 64"
[ "$steps" -ge 5 ] && [ "$(state_field "$st" world_size)" = 4 ] || fail "state: steps $steps"
echo "killed the 4-rank run at step $steps ($consumed samples consumed)"

out=$(timeout 300 "$mpiexec" -np 3 --oversubscribe "$cli" stage "$h5" "${common[@]}" --verify \
    --resume "$st" --json "$work/resumed.json") || { echo "$out"; fail "resume at 3 ranks failed"; }
grep -q '^exactly-once: OK$' <<<"$out" || { echo "$out"; fail "no exactly-once: OK after the resume"; }
grep -q "of the interrupted run counted" <<<"$out" || { echo "$out"; fail "the id log was not used"; }
python3 - "$work/resumed.json" "$consumed" <<'PY' || fail "resumed JSON report"
import json, sys
r = json.load(open(sys.argv[1])); consumed = int(sys.argv[2])
e = r["epochs"][0]
assert r["world_size"] == 3 and e["resumed"] and len(set(e["batches_per_rank"])) == 1, e
# Independent of the log: this run's valid samples are exactly the ones not consumed before.
assert sum(e["valid_samples_per_rank"]) == 60000 - consumed, (e, consumed)
assert e["prior_run_samples"] == consumed and e["duplicates"] == 0 and e["missing"] == 0, e
assert r["state"]["epoch"] == 1 and r["state"]["steps_consumed"] == 0, r["state"]
PY

# 2. The issue's commands: stop after 20 steps at 4 ranks, resume at 3 (remainder drop).
st2="$work/s.json"; rm -f "$st2" "$st2.ids"
out=$(timeout 300 "$mpiexec" -np 4 --oversubscribe "$cli" stage "$h5" --shuffle global \
    --sharding global --seed 7 --epochs 1 --save-state "$st2" --stop-after-steps 20 --verify) \
    || { echo "$out"; fail "stop after 20 steps"; }
grep -q "stopped after 20 step" <<<"$out" || { echo "$out"; fail "no stop line"; }
[ "$(state_field "$st2" samples_consumed)" = 2560 ] || fail "20 steps x 4 ranks x 32 = 2560 consumed"
out=$(timeout 300 "$mpiexec" -np 3 --oversubscribe "$cli" stage "$h5" --shuffle global \
    --sharding global --seed 7 --epochs 1 --resume "$st2" --verify) || { echo "$out"; fail "resume"; }
grep -q '^exactly-once: OK$' <<<"$out" || { echo "$out"; fail "no exactly-once: OK (drop)"; }

# 3. byte_range: resumes at the same world size, and refuses another one on every rank.
st3="$work/br.json"; rm -f "$st3" "$st3.ids"
br=(--shuffle local --seed 3 --epochs 2 --batch-size 50)
timeout 300 "$mpiexec" -np 2 --oversubscribe "$cli" stage "$h5" "${br[@]}" --verify \
    --save-state "$st3" --stop-after-steps 700 >/dev/null || fail "byte_range stop"
[ "$(state_field "$st3" epoch)" = 1 ] || fail "700 steps of 600 per epoch end in epoch 1"
out=$(timeout 300 "$mpiexec" -np 2 --oversubscribe "$cli" stage "$h5" "${br[@]}" --verify \
    --resume "$st3") || { echo "$out"; fail "byte_range resume at the same world size"; }
grep -q '^exactly-once: OK$' <<<"$out" || { echo "$out"; fail "byte_range resume verdict"; }
set +e
out=$(timeout 120 "$mpiexec" -np 3 --oversubscribe "$cli" stage "$h5" "${br[@]}" --resume "$st3" 2>&1)
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "byte_range resume at another world size must fail"
[ "$(echo "$out" | grep -c 'byte_range sharding, whose shards depend on the world size')" -ge 1 ] \
    || { echo "$out"; fail "no clear byte_range error"; }

# 4. A damaged state file is a clear error naming it.
echo '{"mpistage_state": 1, "loader": {"format_version": 1' >"$work/bad.json"
set +e
out=$(timeout 120 "$mpiexec" -np 2 --oversubscribe "$cli" stage "$h5" --resume "$work/bad.json" 2>&1)
rc=$?
set -e
[ "$rc" -ne 0 ] && grep -q "bad.json' is not JSON" <<<"$out" || { echo "$out"; fail "damaged state"; }
echo "resume_kill: OK"
