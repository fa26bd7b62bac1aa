#!/usr/bin/env bash
# Per-rank peak resident memory (ru_maxrss of each rank process) of `mpistage stage` against the
# number of samples N, for a fixed-size HDF5 dataset and for TFRecord, with and without
# --verify (benchmarks/README.md, "Memory per rank against N"). Each point stages the first
# STEPS steps of one epoch at NP ranks (the memory of the bookkeeping, not of a whole epoch).
#
#   benchmarks/memory_rss.sh [BUILD_DIR] [BASELINE_BUILD_DIR]
#
# BASELINE_BUILD_DIR (optional): another build (e.g. of main) run side by side on the same
# files, up to N = BASELINE_MAX_N (default 10^8: a stored plan and rank 0's --verify table need
# 13.5 B per sample at 10^9, more than a small machine holds).
# Env: NP (2), STEPS (20), HDF5_NS, TFRECORD_NS (lists of N), WORK_DIR (inputs), OUT (table).
# The HDF5 inputs are chunked datasets with no chunk written (a few KB each, any N); TFRecord
# inputs are real files of one-byte records (17 B per record: 1.7 GB at 10^8).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "${1:-build}" && pwd)"
baseline="${2:-}"
[ -n "$baseline" ] && baseline="$(cd "$baseline" && pwd)"
np="${NP:-2}"
steps="${STEPS:-20}"
hdf5_ns="${HDF5_NS:-1000000 10000000 100000000 1000000000}"
tfrecord_ns="${TFRECORD_NS:-1000000 10000000 100000000}"
baseline_max="${BASELINE_MAX_N:-100000000}"
work="${WORK_DIR:-$build/bench-memory}"
out="${OUT:-$here/results-memory.md}"
mkdir -p "$work"
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
gen="$build/benchmarks/make_memory_inputs"
[ -x "$gen" ] || cmake --build "$build" --target make_memory_inputs > /dev/null

# peak BIN ARGS...: "max mean" peak RSS over the ranks in MB (10^6 bytes), or for a run that
# failed "fail:MAX_MB (the error's first 200 characters)", MAX_MB its peak up to the failure.
peak() {
    local dir rss
    dir="$(mktemp -d)"
    if PEAK_RSS_DIR="$dir" timeout 900 mpirun --oversubscribe -np "$np" \
        "$here/peak_rss.py" "$@" --quiet --batch-size 1024 --epochs 1 \
        --stop-after-steps "$steps" > "$dir/log" 2>&1; then
        cat "$dir"/rank*.kib | awk '{ s += $1; if ($1 > m) m = $1 }
            END { printf "%.0f %.0f", m * 1.024 / 1000, s / NR * 1.024 / 1000 }'
    else
        rss="$(cat "$dir"/rank*.kib 2>/dev/null | awk '{ if ($1 > m) m = $1 }
            END { if (NR) printf "%.0f", m * 1.024 / 1000; else printf "?" }')"
        echo "fail:$rss ($(grep -m1 -E 'Error|error|Killed|killed' "$dir/log" | cut -c1-200 | tr '|' '/'))"
    fi
    rm -rf "$dir"
}

{
    echo "np=$np, first $steps steps of epoch 0 at batch size 1024, $(nproc) cores," \
        "$(date -u '+%Y-%m-%d %H:%M UTC'); peak RSS per rank in MB (max over ranks)"
    echo
    header="| input | N | stage | stage --verify |"
    rule="|---|---:|---:|---:|"
    if [ -n "$baseline" ]; then
        header="$header baseline stage | baseline stage --verify |"
        rule="$rule---:|---:|"
    fi
    echo "$header"
    echo "$rule"
    for kind in hdf5 tfrecord; do
        ns="$hdf5_ns"
        [ "$kind" = tfrecord ] && ns="$tfrecord_ns"
        for n in $ns; do
            file="$work/$kind-$n.$([ "$kind" = hdf5 ] && echo h5 || echo tfrecord)"
            [ -s "$file" ] || "$gen" "$kind" "$file" "$n"
            row="| $kind | $n"
            for bin in "$build" ${baseline:+"$baseline"}; do
                if [ "$bin" = "$baseline" ] && [ "$n" -gt "$baseline_max" ]; then
                    row="$row | not run | not run"
                    continue
                fi
                plain="$(peak "$bin/mpistage" stage "$file")"
                verify="$(peak "$bin/mpistage" stage "$file" --verify)"
                # A failed run's cell is its peak RSS and its error.
                [[ "$plain" == fail:* ]] || plain="${plain%% *}"
                [[ "$verify" == fail:* ]] || verify="${verify%% *}"
                row="$row | $plain | $verify"
            done
            echo "$row |"
            # TFRecord files are real bytes: keep only the small ones.
            [ "$kind" = tfrecord ] && [ "$n" -ge 100000000 ] && rm -f "$file"
        done
    done
} | tee "$out"
