#!/usr/bin/env bash
# End to end (docs/resume.md, "Validation"): a --save-state file and its --verify id log,
# mutated one field at a time, are refused by --resume with a message naming the field, in
# bounded time (never a hang, never "exactly-once: OK" with samples missing); the unmutated
# state resumes exactly once. Edits that stay consistent (epoch moved to the next or the
# previous epoch inside the run, steps_consumed moved with samples_consumed) are refused by
# the consumed-id digest ("Consumed-id digest"), with and without --verify.
# Issue "The last silent edges": (F1) a save never rewrites the id log the state on disk names
# (each log is a new file, named by its state); (F2) a state without the digest (format version
# 3, or the key removed) is refused unless --accept-legacy-state; (F3) a forged num_samples of
# 2^32 or 2^63 sizes nothing before it is checked; a 2 GiB --resume file is refused unread.
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

# log_of STATE: the id log a state file names (relative to the state's folder).
log_of() {
    python3 -c 'import json,os,sys; print(os.path.join(os.path.dirname(sys.argv[1]), json.load(open(sys.argv[1]))["id_log"]["path"]))' "$1"
}
st="$work/st.json"; rm -f "$st" "$st".ids*
run --save-state "$st" --stop-after-steps 10 --verify -q >/dev/null || fail "first run"
# 10 steps x 2 ranks x 32 = 640 samples and ids.
[ "$(stat -c %s "$(log_of "$st")")" = $((640 * 8)) ] || fail "id log size"

# mutate NAME PYTHON-EDIT EXPECTED-TEXT [ARGS...]: the edited copy of the state (and of its
# log) must be refused with EXPECTED-TEXT in the message, resumed with ARGS (default
# --verify). MUTATE_FROM names another saved state to edit.
mutate() {
    local name="$1" edit="$2" want="$3" m="$work/m_$1.json" from="${MUTATE_FROM:-$st}"
    shift 3
    local args=("$@")
    [ "${#args[@]}" -gt 0 ] || args=(--verify)
    cp "$(log_of "$from")" "$m.ids"
    python3 - "$from" "$m" "$m.ids" <<PY
import json, sys
j = json.load(open(sys.argv[1]))
j["id_log"]["path"] = sys.argv[3].rsplit("/", 1)[1]
log = sys.argv[3]
$edit
json.dump(j, open(sys.argv[2], "w"))
PY
    set +e
    local start=$SECONDS
    local out; out=$(run --resume "$m" "${args[@]}")
    local rc=$?
    set -e
    elapsed=$((SECONDS - start))
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "$out"; fail "$name: rc $rc (accepted or timed out)"; }
    grep -q "exactly-once: OK" <<<"$out" && { echo "$out"; fail "$name: OK printed"; }
    grep -qF -- "$want" <<<"$out" || { echo "$out"; fail "$name: no '$want' in the message"; }
    echo "  $name: refused in ${elapsed}s ($want)"
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
st1="$work/st1.json"; rm -f "$st1" "$st1".ids*
run --save-state "$st1" --epochs 2 --stop-after-steps 167 --verify -q >/dev/null ||
    fail "run into epoch 1"
python3 -c 'import json,sys; l = json.load(open(sys.argv[1]))["loader"]
assert (l["epoch"], l["steps_consumed"]) == (1, 11), l' "$st1" || fail "st1 is not at epoch 1"
MUTATE_FROM="$st1" mutate epoch_previous 'j["loader"]["epoch"] = 0' "$digest" --epochs 2

# F2: the issue's edit (version 3, digest deleted, steps, samples and log count moved together:
# 960 samples never served, reported exactly once) is refused by default.
mutate legacy_moved '
j["loader"]["format_version"] = 3; del j["loader"]["consumed_digest"]
j["loader"]["steps_consumed"] = 25; j["loader"]["samples_consumed"] = 1600; del j["id_log"]' \
    "--accept-legacy-state" --timeout 10
mutate legacy_moved_verify '
j["loader"]["format_version"] = 3; del j["loader"]["consumed_digest"]' "--accept-legacy-state"
# ... and an honest version-3 state resumes exactly once when accepted knowingly. (Saved at
# --fingerprint full, which versions 3 to 5 compute alike: the `sampled` of version 3 also
# covered every sample's size, a value only a version-3 build or the loader's sampled_v4 makes.)
stf="$work/stf.json"; rm -f "$stf" "$stf".ids*
run --save-state "$stf" --stop-after-steps 10 --verify --fingerprint full -q >/dev/null ||
    fail "run saving a full-fingerprint state"
python3 - "$stf" "$work/v3.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["loader"]["format_version"] = 3; del j["loader"]["consumed_digest"]
json.dump(j, open(sys.argv[2], "w"))
PY
out=$(run --resume "$work/v3.json" --verify --accept-legacy-state) ||
    { echo "$out"; fail "an honest version-3 state with --accept-legacy-state"; }
grep -q '^exactly-once: OK$' <<<"$out" || { echo "$out"; fail "v3 accepted: no exactly-once: OK"; }
echo "  legacy state with --accept-legacy-state: exactly-once: OK"

# F3: a forged num_samples is checked before it sizes anything (it allocated num_samples
# bytes on rank 0 for the id log's duplicate check: 4 GiB at 2^32, std::length_error at 2^63).
for n in 4294967296 9223372036854775808; do
    mutate "num_samples_$n" "j['loader']['num_samples'] = $n" "from another dataset"
    [ "$elapsed" -le 20 ] || fail "num_samples $n: refused after ${elapsed}s"
done
# A 2 GiB --resume file is refused by its size, not read (it was read whole on every rank).
truncate -s 2G "$work/huge.json"
set +e
start=$SECONDS
out=$(run --resume "$work/huge.json")
rc=$?
set -e
rm -f "$work/huge.json"
[ "$rc" -ne 0 ] && [ $((SECONDS - start)) -le 20 ] || { echo "$out"; fail "2 GiB state: rc $rc after $((SECONDS - start))s"; }
grep -qF "holds 2147483648 bytes, more than the 1048576 a state file may hold" <<<"$out" ||
    { echo "$out"; fail "2 GiB state: not refused by its size"; }
echo "  2 GiB --resume file: refused unread in $((SECONDS - start))s"

# F1: --resume S --save-state S --verify never rewrites the log S names: a hard link to that
# log keeps its bytes, so a kill at any point of the save leaves a state whose log holds its ids.
# (The old state's log has the fixed name earlier builds gave it, FILE.ids, which they
# truncated in place; a stale log of a killed run lies beside it.)
rm -f "$work"/f1.json*
cp "$st" "$work/f1.json"
cp "$(log_of "$st")" "$work/f1.json.ids"
python3 - "$work/f1.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); j["id_log"]["path"] = "f1.json.ids"
json.dump(j, open(sys.argv[1], "w"))
PY
ln -f "$work/f1.json.ids" "$work/f1-old-log.bin"
echo stale > "$work/f1.json.ids.Zz9999"
before=$(sha256sum < "$work/f1-old-log.bin")
out=$(run --resume "$work/f1.json" --save-state "$work/f1.json" --stop-after-steps 5 --verify) ||
    { echo "$out"; fail "F1: resume and save to the same file"; }
[ "$(sha256sum < "$work/f1-old-log.bin")" = "$before" ] || fail "F1: the old state's id log was rewritten in place"
new_log=$(log_of "$work/f1.json")
[ "$new_log" != "$work/f1.json.ids" ] || fail "F1: the new state names the old log"
[ "$(stat -c %s "$new_log")" = $(((10 + 5) * 64 * 8)) ] || fail "F1: the new log holds $(stat -c %s "$new_log") bytes"
[ ! -e "$work/f1.json.ids.Zz9999" ] || fail "F1: the stale log of a killed run was not removed"
out=$(run --resume "$work/f1.json" --verify) || { echo "$out"; fail "F1: resume of the new state"; }
grep -q '^exactly-once: OK$' <<<"$out" || { echo "$out"; fail "F1: no exactly-once: OK"; }
echo "  F1: the old log kept its bytes; the new state names a new log; exactly-once: OK"

out=$(run --resume "$st" --verify) || { echo "$out"; fail "the unmutated state"; }
grep -q '^exactly-once: OK$' <<<"$out" || { echo "$out"; fail "no exactly-once: OK"; }
echo "resume_mutations: OK"
