#!/usr/bin/env bash
# Configures and builds mpistage. Usage: scripts/build.sh BUILD_DIR BUILD_TYPE [extra cmake args]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-$here/build}"
build_type="${2:-Release}"
shift $(( $# > 2 ? 2 : $# ))
jobs="${MPISTAGE_JOBS:-$(nproc)}"
cmake -S "$here" -B "$build_dir" -DCMAKE_BUILD_TYPE="$build_type" "$@"
cmake --build "$build_dir" -j"$jobs"
