#!/usr/bin/env bash
# Runs one libFuzzer target on a seed corpus built at test time (ctest label "fuzz").
#
#   run_fuzz.sh FUZZER CORPUS_DIR SEEDS_FILE DATA_DIR FASHION_DIR SECONDS
#
# SEEDS_FILE lines (see fuzz/README.md): `data:<glob>` copies files of the shared test data
# (first 1 MiB of each), `fashion:<file>` copies a Fashion-MNIST file, `gunzip-fashion:<file>`
# its decompressed first 1 MiB, `hex:<name>:<hex bytes>` writes a generated seed. Findings are
# written to CORPUS_DIR/../artifacts/ and fail the test.
set -euo pipefail
fuzzer="$1" corpus="$2" seeds="$3" data="$4" fashion="$5" seconds="$6"
limit=1048576
rm -rf "$corpus"
mkdir -p "$corpus" "$corpus/../artifacts"
if [ -f "$seeds" ]; then
    while IFS= read -r line; do
        case "$line" in
        '' | '#'*) ;;
        data:*)
            for f in $data/${line#data:}; do
                [ -f "$f" ] && head -c "$limit" "$f" > "$corpus/data_$(basename "$f")"
            done
            ;;
        fashion:*) head -c "$limit" "$fashion/${line#fashion:}" > "$corpus/fashion_${line#fashion:}" ;;
        gunzip-fashion:*)
            f="${line#gunzip-fashion:}"
            { gzip -dc "$fashion/$f" || true; } | head -c "$limit" > "$corpus/gunzip_${f%.gz}"
            ;;
        hex:*)
            rest="${line#hex:}"
            hex="$(echo "${rest#*:}" | tr -d ' ' | sed 's/../\\x&/g')"
            printf '%b' "$hex" > "$corpus/gen_${rest%%:*}"
            ;;
        *) echo "run_fuzz.sh: $seeds: unknown seed line '$line'" >&2; exit 2 ;;
        esac
    done < "$seeds"
fi
echo "run_fuzz.sh: $(ls "$corpus" | wc -l) seeds in $corpus"
exec "$fuzzer" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$corpus/../artifacts/" "$corpus"
