#!/usr/bin/env bash
# Configures and builds mpistage. Usage: scripts/build.sh BUILD_DIR BUILD_TYPE [extra cmake args]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-$here/build}"
build_type="${2:-Release}"
shift $(( $# > 2 ? 2 : $# ))
jobs="${MPISTAGE_JOBS:-$(nproc)}"
# ccache when present (installed by scripts/install-deps.sh): a second build of the same
# sources, in this or another checkout, compiles only what changed.
launcher=()
if command -v ccache >/dev/null 2>&1; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
              -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
    export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$here}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
    # The tests' precompiled headers (tests/CMakeLists.txt) are cached only with this sloppiness
    # (ccache manual, "Precompiled headers").
    export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
fi
# Ninja when present (scripts/install-deps.sh installs it): it schedules compiles of every
# target across the whole graph, which keeps CI's two cores busy where make waits for a target's
# dependencies. A build directory keeps the generator it was configured with.
generator=()
if command -v ninja >/dev/null 2>&1 && { [ ! -f "$build_dir/CMakeCache.txt" ] ||
        grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$build_dir/CMakeCache.txt"; }; then
    generator=(-G Ninja)
fi
cmake -S "$here" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="$build_type" "${launcher[@]}" "$@"
cmake --build "$build_dir" -j"$jobs"
