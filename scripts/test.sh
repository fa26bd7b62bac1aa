#!/usr/bin/env bash
# The tests, from a fresh Debian 12 machine: install what is missing, build, run the whole
# suite with ctest (MPI tests at 1, 2, 3 and 4 ranks). Long stress runs carry the label
# "stress" and are excluded unless MPISTAGE_STRESS=1.
#
#   scripts/test.sh [extra ctest args]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$here/build-test}"

"$here/scripts/install-deps.sh"
"$here/scripts/build.sh" "$build_dir" RelWithDebInfo -DMPISTAGE_WERROR=ON

if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
exclude=(-LE stress)
[ "${MPISTAGE_STRESS:-0}" = "1" ] && exclude=()
cd "$build_dir"
ctest --output-on-failure -j"$(nproc)" "${exclude[@]}" "$@"
