#!/usr/bin/env bash
# A requested feature that cannot be satisfied fails the configuration with a clear message
# (what Spack's +torch / +cuda ask for): configures SOURCE_DIR with MPISTAGE_REQUIRE_TORCH=ON
# on a "machine without libtorch" (find_package(Torch) disabled, Torch_DIR pointing nowhere),
# the same for CUDA, and a REQUIRE without its WITH option. With HAVE_TORCH=1 (this build found
# libtorch) the same configuration without the disabling succeeds, so the failure is the
# missing libtorch and nothing else.
# Usage: require_feature.sh SOURCE_DIR WORK_DIR HAVE_TORCH
set -uo pipefail
src="$1"; work="$2"; have_torch="$3"
rm -rf "$work"; mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
common=(-DMPISTAGE_BUILD_TESTS=OFF -DMPISTAGE_BUILD_BENCHMARKS=OFF -DMPISTAGE_BUILD_EXAMPLES=OFF)

expect_failure() {  # NAME PATTERN CMAKE_ARGS...
    local name="$1" pattern="$2"; shift 2
    if cmake -S "$src" -B "$work/$name" "${common[@]}" "$@" >"$work/$name.log" 2>&1; then
        cat "$work/$name.log"; fail "$name: configure succeeded"
    fi
    # CMake wraps messages: compare with the line breaks and indentation folded to one space.
    tr -s ' \n' ' ' <"$work/$name.log" | grep -F -e "$pattern" >/dev/null \
        || { cat "$work/$name.log"; fail "$name: no '$pattern'"; }
    echo "$name: configure failed as expected: ... $pattern ..."
}

expect_failure torch "libtorch was requested (MPISTAGE_REQUIRE_TORCH=ON, Spack +torch)" \
    -DMPISTAGE_WITH_TORCH=ON -DMPISTAGE_REQUIRE_TORCH=ON -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON \
    -DTorch_DIR=/nonexistent
expect_failure cuda "CUDA was requested (MPISTAGE_REQUIRE_CUDA=ON, Spack +cuda)" \
    -DMPISTAGE_WITH_TORCH=OFF -DMPISTAGE_WITH_CUDA=ON -DMPISTAGE_REQUIRE_CUDA=ON \
    -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON
expect_failure contradiction "MPISTAGE_REQUIRE_TORCH=ON asks for TORCH but MPISTAGE_WITH_TORCH=OFF" \
    -DMPISTAGE_WITH_TORCH=OFF -DMPISTAGE_REQUIRE_TORCH=ON

if [ "$have_torch" = 1 ]; then
    cmake -S "$src" -B "$work/control" "${common[@]}" -DMPISTAGE_WITH_CUDA=OFF \
        -DMPISTAGE_WITH_TORCH=ON -DMPISTAGE_REQUIRE_TORCH=ON >"$work/control.log" 2>&1 \
        || { cat "$work/control.log"; fail "control: +torch with libtorch present failed"; }
    grep -q "libtorch 1" "$work/control.log" || { cat "$work/control.log"; fail "control: no libtorch"; }
    echo "control: with libtorch present the required configuration succeeds"
fi
echo "require_feature: OK"
