#!/usr/bin/env bash
# Installs every system package mpistage needs to build, test and run its main job on Debian 12.
# Idempotent: packages already present are skipped by apt-get. Needs root (or sudo).
set -euo pipefail

packages=(
    build-essential cmake ninja-build pkg-config git ca-certificates ccache clang-14 lld-14
    openmpi-bin libopenmpi-dev
    libhdf5-openmpi-dev hdf5-tools
    libtorch-dev
    libcli11-dev nlohmann-json3-dev zlib1g-dev libisal-dev libsqlite3-dev libxxhash-dev
    libgtest-dev libgmock-dev libbenchmark-dev
    dataset-fashion-mnist
    python3-torch python3-h5py-mpi python3-mpi4py python3-numpy
    python3-dev python3-pybind11 python3-pytest
)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" >/dev/null || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all packages present"
    exit 0
fi

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
