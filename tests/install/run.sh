#!/usr/bin/env bash
# Install test (ctest label "install"): uses the installed package like a user would.
#
#   run.sh install  BUILD_DIR PREFIX                       # cmake --install BUILD_DIR --prefix PREFIX
#   run.sh cmake    PREFIX WORK CONSUMER_DIR MPIEXEC        # configure, build, run CONSUMER_DIR at 2 ranks
#   run.sh pkgconfig PREFIX WORK MPICXX MPIEXEC            # mpicxx + `pkg-config mpistage`, run at 2 ranks
#
# The consumer gets no hints besides CMAKE_PREFIX_PATH=PREFIX; CMAKE_PREFIX_PATH and
# PKG_CONFIG_PATH from the calling environment are dropped so nothing leaks in by accident.
set -euo pipefail
mode="$1"
shift
unset CMAKE_PREFIX_PATH PKG_CONFIG_PATH CPATH LIBRARY_PATH LD_LIBRARY_PATH

case "$mode" in
install)
    build="$1" prefix="$2"
    rm -rf "$prefix"
    cmake --install "$build" --prefix "$prefix"
    # The exported link interfaces must name only imported targets and flags: an absolute path
    # from this machine would not exist (or be a different file) on the consumer's.
    if grep -n 'INTERFACE_LINK_LIBRARIES' "$prefix"/lib*/cmake/mpistage/*Targets.cmake | grep -E '"/|;/'; then
        echo "install: absolute paths in the exported INTERFACE_LINK_LIBRARIES (above)" >&2
        exit 1
    fi
    # Docs and examples under share/: the README, docs/, the licence, the example programs
    # with their CMake project, and the consumer projects (spack test run builds one).
    for f in share/doc/mpistage/README.md share/doc/mpistage/architecture.md \
             share/doc/mpistage/LICENSE share/mpistage/examples/CMakeLists.txt \
             share/mpistage/examples/first_batch.cpp share/mpistage/examples/global_shuffle.cpp \
             share/mpistage/examples/staging_check.hpp \
             share/mpistage/examples/consumer/CMakeLists.txt \
             share/mpistage/examples/consumer/main.cpp; do
        [ -s "$prefix/$f" ] || { echo "install: $prefix/$f is missing or empty" >&2; exit 1; }
    done
    cmp -s "$prefix/share/doc/mpistage/README.md" "$(dirname "$0")/../../README.md" ||
        { echo "install: share/doc/mpistage/README.md is not the README" >&2; exit 1; }
    echo "install: docs in $prefix/share/doc/mpistage, examples in $prefix/share/mpistage/examples"
    ;;
cmake)
    prefix="$1" work="$2" consumer="$3" mpiexec="$4"
    rm -rf "$work"
    mkdir -p "$work/data"
    cmake -S "$consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix"
    cmake --build "$work/build"
    "$mpiexec" -n 2 --oversubscribe "$work/build/x" "$work/data"
    ;;
pkgconfig)
    prefix="$1" work="$2" mpicxx="$3" mpiexec="$4"
    rm -rf "$work"
    mkdir -p "$work"
    cat > "$work/t.cpp" <<'CPP'
#include <mpi.h>
#include <cstdio>
#include "mpistage/mpistage.hpp"
int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rc = 0;
    {
        mpistage::Communicator comm(MPI_COMM_WORLD);
        const unsigned long long sum = comm.allreduce_sum(1);
        if (sum != static_cast<unsigned long long>(comm.size())) rc = 1;
        if (comm.rank() == 0) std::printf("pkg-config consumer: mpistage %s, %llu ranks\n", MPISTAGE_VERSION, sum);
    }
    MPI_Finalize();
    return rc;
}
CPP
    export PKG_CONFIG_PATH="$(echo "$prefix"/lib*/pkgconfig | tr ' ' ':')"
    flags="$(pkg-config --cflags --libs mpistage)"
    echo "pkg-config --cflags --libs mpistage: $flags"
    # shellcheck disable=SC2086
    "$mpicxx" -std=c++17 "$work/t.cpp" $flags -o "$work/t"
    LD_LIBRARY_PATH="$(pkg-config --variable=libdir mpistage)" "$mpiexec" -n 2 --oversubscribe "$work/t"
    ;;
*)
    echo "run.sh: unknown mode '$mode'" >&2
    exit 2
    ;;
esac
