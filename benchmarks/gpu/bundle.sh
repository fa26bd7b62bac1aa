#!/usr/bin/env bash
# The GPU check for a GPU machine that has no MPI or HDF5 of its own (and no package registry):
# build here, on Debian 12 with the CUDA toolkit, and carry the binaries with the Debian
# runtime they need (Open MPI, PMIx, HDF5, the CUDA runtime; not glibc or libstdc++, which the
# GPU machine has in a newer version) to the GPU machine, where `run.sh` in the bundle runs
# the CUDA device tests, gpu_bench at 1 and 2 ranks, the CLI at 4 ranks, the Python module
# (compiled there) at 1 and 2 ranks and compute-sanitizer (docs/gpu.md).
# Open MPI is relocated with OPAL_PREFIX; a singleton needs no launcher (ess_singleton_isolated).
#
#   benchmarks/gpu/bundle.sh [BUILD_DIR] [BUNDLE_DIR]
#     BUILD_DIR   a build with the CUDA runtime and without libtorch (default build-gpu; made
#                 when absent: -DMPISTAGE_WITH_TORCH=OFF, the Debian libtorch alone is ~500 MB)
#     BUNDLE_DIR  default build-gpu-bundle (about 45 MB)
#   then, on the GPU machine:  OUT=<results dir> BUNDLE_DIR/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build-gpu}
bundle=${2:-$here/build-gpu-bundle}
if [ ! -f "$build/CMakeCache.txt" ]; then
    "$here/scripts/build.sh" "$build" Release -DMPISTAGE_WITH_TORCH=OFF -DMPISTAGE_WITH_PYTHON=OFF \
        -DMPISTAGE_BUILD_EXAMPLES=OFF -DMPISTAGE_REQUIRE_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=80-virtual;90"
fi
cmake --build "$build" --target gpu_bench mpistage_device_cuda_tests mpistage_cli
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/root"
cp "$build/benchmarks/gpu/gpu_bench" "$build/tests/serial/device/mpistage_device_cuda_tests" \
    "$build/mpistage" "$bundle/bin/"
cp -a "$build"/libmpistage.so* "$bundle/lib/"
strip --strip-debug "$bundle"/bin/* "$bundle"/lib/libmpistage.so.*.*.*
# Every shared library the binaries resolve here, but glibc's and the C++ runtime's.
for b in "$bundle"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
    while read -r l; do
        case "$(basename "$l")" in
            libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++*|libgcc_s*|libmpistage*) ;;
            *) cp -L "$l" "$bundle/lib/" ;;
        esac
    done
# Open MPI's and PMIx's components, help files and configuration, and mpiexec with orted.
for p in openmpi-bin libopenmpi3 libpmix2 openmpi-common libhwloc15; do
    dpkg -L "$p" | while read -r f; do
        case "$f" in /usr/share/doc*|/usr/share/man*|*.a|/usr/include*) continue ;; esac
        if [ -f "$f" ]; then echo "${f#/}"; fi
    done
done >"$bundle/files.txt"
tar -C / -chf - -T "$bundle/files.txt" | tar -C "$bundle/root" -xf -
rm "$bundle/files.txt"
# The Python module is compiled there, for that machine's python3 (a different version here):
# its sources, the headers it includes (mpistage's, the generated config, MPI's) and the check.
# (The package's sources go below package/: beside python_check.py, whose folder Python puts
# first on sys.path, they would shadow the package with its extension.)
mkdir -p "$bundle/python/include" "$bundle/python/package"
cp -r "$here/python/src" "$here/benchmarks/gpu/python_check.py" "$bundle/python/"
cp -r "$here/python/mpistage" "$bundle/python/package/"
cp -r "$here/include/mpistage" "$bundle/python/include/"
cp "$build/include/mpistage/config.hpp" "$bundle/python/include/mpistage/"
cp -r "$(mpicc -showme:incdirs | cut -d' ' -f1)" "$bundle/python/mpi-include"  # Open MPI's mpi.h
cat >"$bundle/env.sh" <<'ENV'
# Sourced by run.sh: the carried Debian runtime, relocated.
G=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
R=$G/root/usr
export LD_LIBRARY_PATH=$G/lib:$R/lib/x86_64-linux-gnu:$R/lib/x86_64-linux-gnu/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OPAL_PREFIX=$R PATH=$R/bin:$PATH:/usr/local/cuda/bin HWLOC_PLUGINS_PATH=$G/none
export PMIX_MCA_mca_base_component_path=$R/lib/x86_64-linux-gnu/pmix2/lib/pmix PMIX_MCA_psec=native
export PMIX_MCA_pcompress_base_silence_warning=1
export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
export OMPI_MCA_mca_base_component_show_load_errors=0 OMPI_MCA_plm_rsh_agent=false
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ENV
cat >"$bundle/run.sh" <<'RUN'
#!/usr/bin/env bash
# On the GPU machine: OUT=<dir> run.sh. Runs the CUDA device tests, gpu_bench at 1 and 2
# ranks, the CLI at 4 ranks, the Python module at 1 and 2 ranks and compute-sanitizer (docs/
# gpu.md). Exit status 0 when the CUDA tests pass (none skipped), gpu_bench's byte check
# holds, the CLI and the Python check find every sample exactly once with the right values,
# and compute-sanitizer is clean.
set -uo pipefail
out=$(mkdir -p "${OUT:-.}" && cd "${OUT:-.}" && pwd)
cd "$(dirname "$0")"
source ./env.sh
status=0
step() { echo; echo "== $* ($(date -u +%T), $SECONDS s)"; }
{
step machine
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
grep -m1 "model name" /proc/cpuinfo; nproc; grep PRETTY /etc/os-release
step "CUDA device tests"
timeout 120 bin/mpistage_device_cuda_tests >"$out/cuda_tests.log" 2>&1 || status=1
grep -E "OK \]|FAILED|SKIPPED|Failure|PASSED" "$out/cuda_tests.log"
grep -q SKIPPED "$out/cuda_tests.log" && { echo "FAIL: a CUDA test was skipped"; status=1; }
step "gpu_bench, 1 rank"
timeout 150 bin/gpu_bench "$out/gpu_bench_np1.txt"
rc=$?; echo "rc=$rc (3: bytes right, H2D below 85 % of the pinned peak)"
[ "$rc" = 0 ] || [ "$rc" = 3 ] || status=1
step "gpu_bench, 2 ranks on one GPU (rank 0 reports; they share its link, so rc 3 is expected)"
timeout 120 mpiexec.openmpi -np 2 --bind-to none bin/gpu_bench "$out/gpu_bench_np2.txt"
rc=$?; echo "rc=$rc"; [ "$rc" = 0 ] || [ "$rc" = 3 ] || status=1
step "the CLI at 4 ranks on one GPU: mpistage stage --device cuda --verify"
# A Fashion-MNIST-shaped file (60000 x 28 x 28 uint8 and int64 labels), written with h5py.
if python3 -c 'import h5py, numpy' 2>/dev/null; then
    python3 - "$out/cli.h5" <<'PY'
import sys, h5py, numpy as np
rng = np.random.default_rng(7)
with h5py.File(sys.argv[1], "w") as f:
    f["images"] = rng.integers(0, 256, (60000, 28, 28), dtype=np.uint8)
    f["labels"] = rng.integers(0, 10, 60000, dtype=np.int64)
PY
    for mode in "--stage none" "--stage memory"; do
        echo "-- $mode --shuffle global --epochs 3"
        timeout 120 mpiexec.openmpi -np 4 --oversubscribe --bind-to none bin/mpistage stage "$out/cli.h5" \
            --device cuda $mode --shuffle global --epochs 3 -b 256 --prefetch 4 --threads 2 \
            --verify --progress none || status=1
    done
    rm -f "$out/cli.h5"
else
    echo "no python3 with h5py and numpy here: skipped"
fi
step "the Python module at 1 and 2 ranks: device auto, CUDA tensors through DLPack"
pyinc=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])" 2>/dev/null)
if python3 -c "import torch, pybind11, h5py, mpi4py; assert torch.cuda.is_available()" 2>/dev/null &&
        [ -f "$pyinc/Python.h" ] && command -v g++ >/dev/null; then
    # A hand-written build of python/CMakeLists.txt's module (that machine has no CMake
    # configuration of this project): keep its flags in step with pybind11_add_module's.
    pkg=$(mktemp -d); mkdir -p "$pkg/mpistage"; cp python/package/mpistage/*.py "$pkg/mpistage/"
    ext=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
    pb=$(python3 -c "import pybind11; print(pybind11.get_include())")
    for f in python/src/*.cpp; do
        g++ -O2 -fPIC -std=c++17 -fvisibility=hidden -c "$f" -Ipython/include -I"$pb" -I"$pyinc" \
            -Ipython/mpi-include -o "$pkg/$(basename "$f").o" &
    done
    wait
    # The bundle's libmpi.so.40; where the machine's mpi4py loaded its own Open MPI 4.1 first
    # (the H200 machine had 4.1.6), the process uses that one: the same soname and ABI.
    if g++ -shared "$pkg"/*.o -Llib -lmpistage -l:libmpi.so.40 -Wl,-rpath,"$PWD/lib" \
            -o "$pkg/mpistage/_mpistage$ext"; then
        PYTHONPATH=$pkg timeout 120 python3 python/python_check.py "$pkg/check1.h5" || status=1
        PYTHONPATH=$pkg timeout 120 mpiexec.openmpi -np 2 --oversubscribe --bind-to none \
            -x PYTHONPATH python3 python/python_check.py "$pkg/check2.h5" || status=1
    else
        echo "FAIL: the Python module did not compile"; status=1
    fi
    rm -rf "$pkg"
else
    echo "no python3 with a CUDA torch, pybind11, h5py, mpi4py, its headers and g++ here: skipped"
fi
for tool in memcheck racecheck synccheck; do
    step "compute-sanitizer $tool on the CUDA device tests"
    if ! command -v compute-sanitizer >/dev/null; then echo "compute-sanitizer: not installed"; break; fi
    timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 bin/mpistage_device_cuda_tests \
        >"$out/sanitizer_$tool.log" 2>&1 || status=1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|FAILED" "$out/sanitizer_$tool.log" | tail -4
done
step "done: status $status"
exit "$status"
} 2>&1 | tee "$out/gpu_check.log"
exit "${PIPESTATUS[0]}"
RUN
chmod +x "$bundle/run.sh"
du -sh "$bundle"
