#!/usr/bin/env bash
# Cost of the dataset fingerprint levels (docs/resume.md, "Fingerprint levels"), side by side
# in one run on one file: `mpistage stage FILE --stop-after-steps 1` with --fingerprint
# sampled and full (the construction is where the fingerprint is computed; one step is
# staged), and `cat FILE > /dev/null` as the raw read of the same bytes (page cache warm).
# Prints the median of RUNS runs of each, and full − sampled.
# Usage: benchmarks/fingerprint_cost.sh MPISTAGE FILE [RANKS] [RUNS]
set -euo pipefail
bin=$1
file=$2
ranks=${3:-2}
runs=${4:-5}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
seconds() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
cat "$file" >/dev/null  # warm-up
declare -A med
for what in cat sampled full; do
    for ((k = 0; k < runs; ++k)); do
        if [[ $what == cat ]]; then
            seconds cat "$file"
        else
            seconds mpirun --oversubscribe -np "$ranks" "$bin" stage "$file" --batch-size 64 \
                --stop-after-steps 1 --fingerprint "$what" -q
        fi
    done | median > /tmp/fingerprint_cost.$$
    med[$what]=$(cat /tmp/fingerprint_cost.$$)
done
rm -f /tmp/fingerprint_cost.$$
printf 'file %s (%s bytes), %s ranks, median of %s runs\n' "$file" "$(stat -c %s "$file")" "$ranks" "$runs"
printf '  cat (raw read, warm)      %8.3f s\n' "${med[cat]}"
printf '  stage, sampled            %8.3f s\n' "${med[sampled]}"
printf '  stage, full               %8.3f s\n' "${med[full]}"
printf '  full - sampled            %8.3f s\n' "$(echo "${med[full]} - ${med[sampled]}" | bc -l)"
