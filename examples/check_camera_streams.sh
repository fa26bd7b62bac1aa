#!/usr/bin/env bash
# ctest example_camera_streams.cli: the camera example's command line and report.
#   1. `--help` prints the usage once (rank 0 only) and exits 0 (it used to fail in std::stoul)
#   2. a bad argument is a clear CLI11 error, exit non-zero, printed once
#   3. at 3 ranks (rebalance): one line per camera naming the ranks and the frames each saw, in
#      order; frames really moved between ranks; every check of the example OK
# Usage: check_camera_streams.sh MPIEXEC EXAMPLE
set -euo pipefail
mpiexec="$1"; example="$2"
fail() { echo "FAIL: $*" >&2; exit 1; }
run() {  # run NP ARGS...: sets rc, out, err
    local np="$1"; shift
    set +e
    out=$(timeout -k 5 50 "$mpiexec" -np "$np" --oversubscribe "$example" "$@" 2>/tmp/camera_err.$$)
    rc=$?
    set -e
    err=$(cat /tmp/camera_err.$$); rm -f /tmp/camera_err.$$
}

run 2 --help
[ "$rc" -eq 0 ] || { echo "$out$err"; fail "--help: rc=$rc"; }
grep -q -e stoul -e "terminate called" <<<"$out$err" && fail "--help: $err"
[ "$(grep -c '^Usage: example_camera_streams' <<<"$out")" -eq 1 ] || { echo "$out"; fail "--help: usage not printed once"; }
grep -q -e '--remainder' <<<"$out" || fail "--help does not list --remainder"
echo "PASS --help (rc 0, usage printed once)"

run 2 nine
{ [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -lt 128 ]; } || { echo "$out$err"; fail "bad CAMERAS: rc=$rc"; }
grep -q -e stoul -e "terminate called" <<<"$err" && fail "bad CAMERAS: $err"
[ "$(grep -c '^cameras: .*nine' <<<"$err")" -eq 1 ] \
    || { echo "$err"; fail "bad CAMERAS: no single clear message"; }
echo "PASS bad argument: $(head -1 <<<"$err")"

run 3 9 16384
echo "$out"
[ "$rc" -eq 0 ] || { echo "$err"; fail "3 ranks: rc=$rc"; }
for c in 0 1 2 3 4 5 6 7 8; do
    grep -q -E "^ +$c +[0-9]+ +[0-9]+ +[0-9]+  (\(no frames\)|rank [0-2]: [0-9])" <<<"$out" || fail "no line for camera $c"
done
grep -q -E '\| rank [0-2]: ' <<<"$out" || fail "no camera's frames were seen by two ranks (nothing rebalanced)"
moved=$(sed -n 's/^frames moved between ranks: //p' <<<"$out")
[ "${moved:-0}" -gt 0 ] || fail "no frames moved between ranks"
grep -qx 'frame order per camera on every rank: OK' <<<"$out" || fail "frame order"
grep -q '^each frame exactly once: OK' <<<"$out" || fail "exactly once"
echo "example camera_streams cli: OK"
