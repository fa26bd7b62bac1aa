#!/usr/bin/env bash
# Staging throughput, measured side by side on the same files in one run (DESIGN.md §5):
#   mpistage stage            (this project)
#   PyTorch DataLoader + DistributedSampler + h5py   (baseline_torch_h5py.py)
#   cat FILE > /dev/null      (raw read limit of the same bytes, warm page cache)
#   memcpy bandwidth          (dd from /dev/zero, upper bound of a host copy)
# Reports medians of RUNS runs after one warm-up, and ratios against the baselines.
#
#   benchmarks/stage_vs_torch.sh BUILD_DIR [NP] [RUNS]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:?usage: stage_vs_torch.sh BUILD_DIR [NP] [RUNS]}"
np="${2:-2}"
runs="${3:-5}"
work="${WORK_DIR:-$build/bench-data}"
py=/usr/bin/python3
mkdir -p "$work"
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fm=/usr/share/datasets/fashion-mnist
[ -s "$work/fmnist.h5" ] || "$build/mpistage" convert idx "$fm/train-images-idx3-ubyte.gz" \
    "$fm/train-labels-idx1-ubyte.gz" -o "$work/fmnist.h5" >/dev/null
[ -s "$work/resnet50.h5" ] || "$py" "$here/make_workload.py" "$work/resnet50.h5" 2000

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

bench() {  # bench NAME FILE BATCH EPOCHS FIELD...
    local name="$1" file="$2" batch="$3" epochs="$4"; shift 4
    local fields=("$@") flags=()
    for f in "${fields[@]}"; do flags+=(--field "$f"); done
    local ms=() ts=() cs=()
    for i in $(seq 0 "$runs"); do
        # mpistage: bytes over all ranks / slowest rank's epoch time
        mpirun -np "$np" --oversubscribe "$build/mpistage" stage "$file" "${flags[@]}" \
            --batch-size "$batch" --epochs "$epochs" --shuffle local --remainder pad \
            --threads 2 --prefetch 4 --quiet --json "$work/m.json"
        m=$("$py" -c "import json;r=json.load(open('$work/m.json'))['ranks'];print(sum(x['bytes'] for x in r)/max(x['seconds'] for x in r)/1e6)")
        t=$(mpirun -np "$np" --oversubscribe "$py" "$here/baseline_torch_h5py.py" "$file" "$batch" "$epochs" 1 "${fields[@]}" \
            | "$py" -c "import json,sys;r=json.loads(sys.stdin.read());print(r['bytes']/r['seconds']/1e6)")
        s=$( { /usr/bin/time -f "%e" cat "$file" > /dev/null; } 2>&1 )
        c=$("$py" -c "import os;print(os.path.getsize('$file')/max($s,1e-3)/1e6)")
        if [ "$i" -gt 0 ]; then ms+=("$m"); ts+=("$t"); cs+=("$c"); fi
    done
    local mm tm cm
    mm=$(printf '%s\n' "${ms[@]}" | median)
    tm=$(printf '%s\n' "${ts[@]}" | median)
    cm=$(printf '%s\n' "${cs[@]}" | median)
    printf '%-10s np=%d  mpistage %9.1f MB/s  torch+h5py %9.1f MB/s  cat %9.1f MB/s  | mpistage/torch %6.2fx  mpistage/cat %5.2f\n' \
        "$name" "$np" "$mm" "$tm" "$cm" "$("$py" -c "print($mm/$tm)")" "$("$py" -c "print($mm/$cm)")"
}

memcpy=$( { dd if=/dev/zero of=/dev/null bs=1M count=8192 2>&1; } | awk '/copied/ {print $(NF-1), $NF}')
echo "memcpy (dd /dev/zero -> /dev/null): $memcpy"
bench fmnist "$work/fmnist.h5" 64 1 images labels
bench resnet50 "$work/resnet50.h5" 16 1 images labels
