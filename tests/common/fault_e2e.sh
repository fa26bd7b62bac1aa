# Sourced by the e2e scripts that run the CLI under the LD_PRELOAD fault injector
# (tests/tools/fault_inject.c): arguments MPISTAGE_CLI WORK_DIR TEST_DATA_DIR FASHION_MNIST_DIR.
# Sets cli, work (absolute), mpiexec, inject, h5 and tfr (Fashion-MNIST t10k, tests/common/t10k_e2e.sh,
# converted once into WORK_DIR), defines fail; exits 77 (skipped) without Fashion-MNIST.
cli="$(readlink -f "$1")"; work="$2"; fmnist="$4"
inject="${MPISTAGE_FAULT_INJECT:?set MPISTAGE_FAULT_INJECT to libmpistage_fault_inject.so}"
if [ ! -s "$fmnist/t10k-images-idx3-ubyte.gz" ]; then
    echo "SKIP: Fashion-MNIST not found in '$fmnist' (Debian's dataset-fashion-mnist)"
    exit 77
fi
mpiexec="${MPIEXEC:-mpirun}"
mkdir -p "$work"
work="$(readlink -f "$work")"
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=t10k_e2e.sh
source "$(dirname "${BASH_SOURCE[0]}")/t10k_e2e.sh"
