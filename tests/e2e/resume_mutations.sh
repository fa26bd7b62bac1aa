#!/usr/bin/env bash
# End to end (docs/resume.md, "Validation"): a --save-state file and its --verify id log,
# mutated one field at a time, are refused by --resume with a message naming the field, in
# bounded time (never a hang, never "exactly-once: OK" with samples missing); the unmutated
# state resumes exactly once. Edits that stay consistent (epoch moved to the next or the
# previous epoch inside the run, steps_consumed moved with samples_consumed) are refused by
# the consumed-id digest ("Consumed-id digest"), with and without --verify.
# Usage: resume_mutations.sh MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR
set -euo pipefail
cli="$1"; work="$2"; fmnist="$4"
mpiexec="${MPIEXEC:-mpirun}"
mkdir -p "$work"
h5="$work/t10k.h5"
[ -s "$h5" ] || "$cli" convert idx "$fmnist/t10k-images-idx3-ubyte.gz" "$fmnist/t10k-labels-idx1-ubyte.gz" -o "$h5" >/dev/null
fail() { echo "FAIL: $*" >&2; exit 1; }
common=(--shuffle global --sharding global --seed 3 --epochs 1 --batch-size 32 --timeout 10)
run() { timeout 120 "$mpiexec" -np 2 --oversubscribe "$cli" stage "$h5" "${common[@]}" "$@" 2>&1; }

st="$work/st.json"; rm -f "$st" "$st.ids"
run --save-state "$st" --stop-after-steps 10 --verify -q >/dev/null || fail "first run"
# 10 steps x 2 ranks x 32 = 640 samples and ids.
[ "$(stat -c %s "$st.ids")" = $((640 * 8)) ] || fail "id log size"

# mutate NAME PYTHON-EDIT EXPECTED-TEXT [ARGS...]: the edited copy of the state (and of its
# log) must be refused with EXPECTED-TEXT in the message, resumed with ARGS (default
# --verify). MUTATE_FROM names another saved state to edit.
mutate() {
    local name="$1" edit="$2" want="$3" m="$work/m_$1.json" from="${MUTATE_FROM:-$st}"
    shift 3
    local args=("$@")
    [ "${#args[@]}" -gt 0 ] || args=(--verify)
    cp "$from.ids" "$m.ids"
    python3 - "$from" "$m" "$m.ids" <<PY
import json, sys
j = json.load(open(sys.argv[1]))
j["id_log"]["path"] = sys.argv[3].rsplit("/", 1)[1]
log = sys.argv[3]
$edit
json.dump(j, open(sys.argv[2], "w"))
PY
    set +e
    local out; out=$(run --resume "$m" "${args[@]}")
    local rc=$?
    set -e
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "$out"; fail "$name: rc $rc (accepted or timed out)"; }
    grep -q "exactly-once: OK" <<<"$out" && { echo "$out"; fail "$name: OK printed"; }
    grep -qF -- "$want" <<<"$out" || { echo "$out"; fail "$name: no '$want' in the message"; }
    echo "  $name: refused ($want)"
}

mutate count_huge 'j["id_log"]["count"] = 10**9' "id_log.count 1000000000 differs"
mutate count_negative 'j["id_log"]["count"] = -1' "id_log is"
mutate count_all 'j["id_log"]["count"] = 10000; j["loader"]["samples_consumed"] = 10000' \
    "holds 640 ids"
mutate samples_all 'j["loader"]["samples_consumed"] = 10000' "differs from the state's samples_consumed"
mutate steps_negative 'j["loader"]["steps_consumed"] = -1' "key 'steps_consumed' is -1"
mutate epoch_past 'j["loader"]["epoch"] = 5' "stands at epoch 5"
mutate batch_zero 'j["loader"]["batch_size"] = 0' "batch_size must be at least 1"
mutate world_huge 'j["loader"]["world_size"] = 2**40' "key 'world_size' is 1099511627776"
mutate log_duplicate '
b = bytearray(open(log, "rb").read()); b[8:16] = b[0:8]; open(log, "wb").write(bytes(b))' "twice"
mutate log_short 'open(log, "r+b").truncate(8)' "holds 1 ids"
mutate log_out_of_range '
b = bytearray(open(log, "rb").read()); b[0:8] = (10000).to_bytes(8, "little"); open(log, "wb").write(bytes(b))' \
    "outside [0, 10000)"

# Consistent edits: only the digest of the consumed ids tells them from a real state.
digest="key 'consumed_digest'"
mutate epoch_next 'j["loader"]["epoch"] = 1' "$digest" --epochs 2
mutate epoch_next_verify 'j["loader"]["epoch"] = 1' "$digest" --epochs 2 --verify
# (without the id log, whose count would name the edit first)
mutate steps_with_samples '
j["loader"]["steps_consumed"] = 12; j["loader"]["samples_consumed"] = 768; del j["id_log"]' \
    "$digest"
# A state inside epoch 1 (epoch 0 has 156 full steps of 2 x 32 samples, the tail dropped;
# the last flag given wins, so --epochs 2 overrides the common --epochs 1) moved back to
# epoch 0.
st1="$work/st1.json"; rm -f "$st1" "$st1.ids"
run --save-state "$st1" --epochs 2 --stop-after-steps 167 --verify -q >/dev/null ||
    fail "run into epoch 1"
python3 -c 'import json,sys; l = json.load(open(sys.argv[1]))["loader"]
assert (l["epoch"], l["steps_consumed"]) == (1, 11), l' "$st1" || fail "st1 is not at epoch 1"
MUTATE_FROM="$st1" mutate epoch_previous 'j["loader"]["epoch"] = 0' "$digest" --epochs 2

out=$(run --resume "$st" --verify) || { echo "$out"; fail "the unmutated state"; }
grep -q '^exactly-once: OK$' <<<"$out" || { echo "$out"; fail "no exactly-once: OK"; }
echo "resume_mutations: OK"
