#!/usr/bin/env bash
# The GPU check, prepared to run as is on a GPU machine (docs/gpu.md):
#  1. configures the project (MPI, parallel HDF5, ...: scripts/install-deps.sh installs them)
#     against the libtorch of the machine's PyTorch when there is one, and builds gpu_bench and
#     the device tests only;
#  2. runs the device tests (CPU and CUDA: ctest -L 'serial|cuda' in tests/serial/device);
#  3. runs gpu_bench: pinned vs pageable cudaMemcpy for 1-256 MiB, the real loader + stager's
#     throughput with and without an emulated compute kernel per step, and a byte check.
#  On a GPU it stops first, with one line, when the driver is older than the CUDA runtime;
#  CUDA tests must run with none skipped; with compute-sanitizer, memcheck and racecheck run
#  on the CUDA device tests.
# MPISTAGE_FAKE_CUDA=1: the same end to end on the CUDA test double (tests/fake_cuda, preloaded;
# no GPU needed, so the script is known to work before a GPU session; its numbers are not GPU
# numbers).
# Results: stdout, and $OUT/gpu_results.txt when OUT is set.
# MPISTAGE_GPU_CMAKE_ARGS: more cmake arguments (word-split), e.g. a compiler launcher.
# Usage: benchmarks/gpu/run.sh [BUILD_DIR]   (default: build-gpu, build-fake-cuda with the double)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
fake="${MPISTAGE_FAKE_CUDA:-0}"
if [ "$fake" = 1 ]; then build="${1:-$root/build-fake-cuda}"; else build="${1:-$root/build-gpu}"; fi
results="${OUT:+$OUT/gpu_results.txt}"
[ -n "$results" ] && : >"$results"
say() { echo "$*"; [ -z "$results" ] || echo "$*" >>"$results"; }
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
    [ -x "$d/nvcc" ] && { export PATH="$d:$PATH"; break; }
done
jobs=$(nproc 2>/dev/null || echo 4)

say "== mpistage benchmarks/gpu/run.sh on $(hostname) at $(date -u +%FT%TZ)"
extra=()
if [ "$fake" = 1 ]; then
    say "MPISTAGE_FAKE_CUDA=1: the CUDA test double stands for the GPU (not GPU numbers)"
    extra=(-DMPISTAGE_GPU_BENCH_NVCC=OFF)
else
    # A driver older than the runtime makes every CUDA call fail: say so and stop.
    runtime=$(sed -n 's/.*"cuda" *: *{ *"name"[^}]*"version" *: *"\([0-9]*\.[0-9]*\).*/\1/p' \
        /usr/local/cuda/version.json 2>/dev/null | head -1)
    [ -n "$runtime" ] || runtime=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
    driver=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)
    say "CUDA runtime ${runtime:-?}, driver supports CUDA ${driver:-?}"
    if [ -n "$runtime" ] && [ -n "$driver" ] && \
        [ "$(printf '%s\n%s\n' "$driver" "$runtime" | sort -V | head -1)" != "$runtime" ]; then
        say "STOP: the driver supports CUDA $driver, older than the runtime $runtime: every CUDA test would be skipped"
        exit 2
    fi
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader | while read -r l; do say "gpu: $l"; done
torch_prefix=$(timeout 120 python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
say "torch cmake prefix: ${torch_prefix:-(none)}"

configure() {  # configure [extra cmake args...]
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMPISTAGE_BUILD_EXAMPLES=OFF \
        "${extra[@]}" ${MPISTAGE_GPU_CMAKE_ARGS:-} "$@" \
        >"$build.configure.log" 2>&1
}
mkdir -p "$(dirname "$build")"
if [ -n "$torch_prefix" ] && configure -DCMAKE_PREFIX_PATH="$torch_prefix"; then
    say "configured with the machine's libtorch"
elif rm -rf "$build" && configure -DMPISTAGE_WITH_TORCH=OFF; then
    say "configured without libtorch (none, or its CMake config failed: see $build.configure.log)"
else
    cat "$build.configure.log"; say "FAIL: configure"; exit 1
fi
grep -E "mpistage: CUDA" "$build.configure.log" | while read -r l; do say "$l"; done
targets=(gpu_bench mpistage_device_tests mpistage_device_cuda_tests)
[ "$fake" = 1 ] && targets+=(mpistage_fake_cudart mpistage_device_fake_tests)
if ! cmake --build "$build" -j"$jobs" --target "${targets[@]}" >"$build.build.log" 2>&1; then
    tail -50 "$build.build.log"; say "FAIL: build"; exit 1
fi
say "built: $(ls "$build"/benchmarks/gpu/gpu_bench "$build"/tests/serial/device/mpistage_device_*tests 2>/dev/null | xargs -n1 basename | tr '\n' ' ')"

status=0
if [ "$fake" = 1 ]; then
    export LD_PRELOAD="$build/tests/fake_cuda/libmpistage_fake_cudart.so${LD_PRELOAD:+:$LD_PRELOAD}"
    export MPISTAGE_FAKE_CUDA_COPY_DELAY_US="${MPISTAGE_FAKE_CUDA_COPY_DELAY_US:-200}"
fi
if ls "$build"/tests/serial/device/mpistage_device_cuda_tests >/dev/null 2>&1; then
    (cd "$build/tests/serial/device" && timeout 240 ctest -L 'serial|cuda' -j 8 --output-on-failure) >"$build.ctest.log" 2>&1 || status=1
    grep -E "tests passed|tests failed|Skipped|Failed|\*\*\*" "$build.ctest.log" | while read -r l; do say "ctest: $l"; done
    [ "$status" = 0 ] || { tail -60 "$build.ctest.log"; say "FAIL: tests"; }
    # The CUDA tests (prefix cuda.) must all run; CPU-path tests skip when a device is there.
    skipped=$(grep -cE "#[0-9]+: cuda\.[^ ]* .*Skipped" "$build.ctest.log" || true)
    say "CUDA tests skipped: $skipped"
    [ "$skipped" = 0 ] || { say "FAIL: $skipped CUDA test(s) skipped"; status=1; }
    if [ "$fake" != 1 ] && command -v compute-sanitizer >/dev/null; then
        for tool in memcheck racecheck; do
            if timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 9 \
                "$build/tests/serial/device/mpistage_device_cuda_tests" >"$build.$tool.log" 2>&1; then
                say "compute-sanitizer $tool: clean"
            else
                tail -30 "$build.$tool.log"; say "FAIL: compute-sanitizer $tool"; status=1
            fi
        done
    fi
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
timeout 240 "$build/benchmarks/gpu/gpu_bench" "$build/gpu_bench.txt"
bench=$?
[ -z "$results" ] || cat "$build/gpu_bench.txt" >>"$results"
case $bench in
    0) say "gpu_bench: OK" ;;
    3) say "gpu_bench: bytes OK, but H2D below 85% of the pinned peak" ;;
    *) say "FAIL: gpu_bench exited $bench"; status=1 ;;
esac
exit $status
